"""OpenTelemetry traces and metrics (extra ``otel``: ``opentelemetry-api`` only).

A :class:`~liftbridge_sync.Client` traces its publishes and records messaging metrics by
itself once an OpenTelemetry SDK is configured (the global providers, or the
``tracer_provider=``/``meter_provider=`` given to the client). Without the API
installed, or with no SDK configured when the client first publishes, nothing here runs
and publishing costs what it did. It follows the OpenTelemetry messaging semantic
conventions:

* a ``send <stream>`` PRODUCER span per publish, with ``messaging.system="liftbridge"``,
  ``messaging.destination.name``, ``messaging.destination.partition.id``,
  ``messaging.operation.type="send"`` and the correlation id as
  ``messaging.message.id``; a failed publish records its error on the span (a
  ``publish_to_subject`` is a ``send <subject>`` span, named after its subject);
* that span's context injected into the message's headers by the configured
  propagator (W3C ``traceparent``/``tracestate`` and ``baggage`` by default), never
  over a header the caller set, and not at all when the caller set a trace context
  (or built the client with ``trace_propagation=False``);
* per ``publish_batch``, as the conventions advise for batch APIs: a ``create <stream>``
  PRODUCER span per message, whose context its headers carry (a message whose caller
  set a trace context keeps it, and gets none), and one ``send <stream>`` CLIENT span
  with ``messaging.batch.message_count``, linked to each message's creation context.
  ``ClientOptions(batch_create_spans=False)`` makes no ``create`` spans: the batch's
  ``send`` span is then a PRODUCER span whose context the messages carry, linked to
  the contexts callers set. A batch refused before it is sent (a bad item or argument)
  sent no message: its ``send`` span and its ``create`` spans, which end once the batch
  is framed, are errors with the refusal's ``error.type``, as the conventions make a
  failed operation's span. (An SDK keeps 128 links per span unless
  ``OTEL_SPAN_LINK_COUNT_LIMIT`` says otherwise; it drops the rest);
* metrics ``messaging.client.operation.duration`` (seconds, from the call to the ack),
  ``messaging.client.sent.messages``, ``messaging.client.consumed.messages`` (once per
  delivery, however many times it is processed) and ``messaging.process.duration``
  (both by :func:`process`); and
  observable ones per client, told apart by ``messaging.client.id`` (``<pid>-<n>``):
  ``messaging.liftbridge.publish.in_flight``, ``.publish.resent``, ``.publish.connects``
  and ``messaging.liftbridge.consumer.lag`` (the leaders asked within half the metric
  reader's collection timeout; a partition whose leader did not answer in it is left
  out). A client reports them from its first publish in a process until it is closed
  (or garbage collected).

On the consuming side, wrap the handling of each message::

    for msg in client.subscribe("orders"):
        with liftbridge_sync.otel.process(msg):
            handle(msg)  # spans made here belong to the producer's trace

:func:`process` opens a CONSUMER ``process <stream>`` span, a child of the producer's
span and linked to it (the producer's baggage current in it too), so each message gets
its own correct trace even though the loop itself runs in one context (the trap
aiokafka users fall into). :func:`extract` gives a
message's producer context for your own spans, and :func:`extract_headers` the same
from bare headers, such as the Spark source's ``headers`` column.

The package's modules, each one concern:

* :mod:`._telemetry`: :func:`telemetry_for` and a client's :class:`Telemetry`, each
  publishing call (``publish``, ``publish_async``, ``publish_batch``,
  ``publish_to_subject``) in its spans;
* :mod:`._spans`: one publish's span and metric points, ended from its outcome;
* :mod:`._propagation`: the trace context in headers (:func:`extract`,
  :func:`extract_headers`, and what a publish's headers are given);
* :mod:`._observed`: the observable instruments, made once per meter provider;
* :mod:`._consuming`: :func:`process`;
* :mod:`._conventions`: what the semantic conventions fix for every span and point.
"""

from liftbridge_sync.otel._consuming import process
from liftbridge_sync.otel._propagation import extract, extract_headers
from liftbridge_sync.otel._telemetry import Outcomes as Outcomes
from liftbridge_sync.otel._telemetry import Sender as Sender
from liftbridge_sync.otel._telemetry import Telemetry, telemetry_for

__all__ = ["Telemetry", "extract", "extract_headers", "process", "telemetry_for"]
