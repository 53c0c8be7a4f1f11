"""The Ray Serve application's old import path, kept for `serve run
strata_server.ray_serve:app_builder ...` and `serve deploy` configs written before it moved to
strata_server.ray.serve."""

from strata_server.ray.serve import app_builder

__all__ = ["app_builder"]
