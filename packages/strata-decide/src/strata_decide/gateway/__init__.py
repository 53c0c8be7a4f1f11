"""The typed-decision gateway: ``POST /v1/systemone`` on top of a Strata (or compatible) server."""

from .app import GatewayConfig, create_app

__all__ = ["GatewayConfig", "create_app"]
