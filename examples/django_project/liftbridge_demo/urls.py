"""URLs of the example project."""

from __future__ import annotations

from django.urls import path
from orders import views

urlpatterns = [
    path("healthz", views.healthz),
    path("messages", views.publish),
    path("messages/async", views.publish_later),
]
