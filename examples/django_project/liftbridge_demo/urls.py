"""URLs of the example project."""

from __future__ import annotations

from django.urls import path
from health_check.views import HealthCheckView
from orders import views

urlpatterns = [
    path("healthz", views.healthz),
    # Readiness with django-health-check (extra django-health): is Liftbridge reachable?
    path("ht/", HealthCheckView.as_view(checks=["liftbridge_sync.django.health.Liftbridge"])),
    path("messages", views.publish),
    path("messages/async", views.publish_later),
]
