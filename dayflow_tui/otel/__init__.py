"""OpenTelemetry traces of runs: ``plan`` (the spans a run's steps become, pure), ``export`` (the SDK, OTLP/HTTP
and OTLP JSON), ``live`` (spans sent while a run is driven, through the agent's ``DriveWatch`` hook).

Above the agent and the store, beside ``views``: the agent never imports it. Nothing here imports Textual.
"""
