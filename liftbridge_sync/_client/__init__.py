"""What :class:`~liftbridge_sync.Client` does below its signatures (not public).

:mod:`.session` holds a client's per-process state (core, publisher, telemetry, stats
reporter) and its fork and close handling; :mod:`.publishing` the publish calls;
:mod:`.admin` the stream administration calls; :mod:`.groups` joining a consumer
group; :mod:`.telemetry` the OpenTelemetry wiring. The client itself is their facade.
"""
