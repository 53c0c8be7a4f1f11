"""`strata-server --ray`: engine replicas on Ray Serve (docs/scaling.md).

`options` (the flags -> `RayOptions`), `serve` (the application, `app_builder`, `serve_replicas`),
`forward` and `metrics` (tested without Ray), `router` (prefix affinity). Nothing is imported
here, so `strata_server.ray.forward` loads without Ray installed.
"""
