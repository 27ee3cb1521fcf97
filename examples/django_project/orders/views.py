"""Views that publish the request body to the example stream."""

from __future__ import annotations

import os

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from liftbridge_sync import ByKey
from liftbridge_sync.django import get_client

_partitioner = ByKey()


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness, and which process answered."""
    return JsonResponse({"pid": os.getpid()})


@csrf_exempt
@require_POST
def publish(request: HttpRequest) -> JsonResponse:
    """Publish the body keyed by ``?key=``; answer with where it was written."""
    client = get_client()
    key = request.GET.get("key", "").encode() or None
    ack = client.publish(settings.EXAMPLE_STREAM, request.body, key=key, partitioner=_partitioner)
    assert ack is not None
    return JsonResponse(
        {"partition": ack.partition, "offset": ack.offset, "pid": os.getpid(), "client": id(client)}
    )


@csrf_exempt
@require_POST
def publish_later(request: HttpRequest) -> JsonResponse:
    """Publish the body without waiting for the ack (flushed when the worker exits)."""
    get_client().publish_async(settings.EXAMPLE_STREAM, request.body, partition=0)
    return JsonResponse({"pid": os.getpid()}, status=202)
