"""The decision playground: one static page at ``/`` (HTML, one script, one stylesheet).

The files ship inside the package (``gateway/static/``), so ``strata-decide serve`` serves
the page with no build step. They are public, as any web page is: the page asks for the API
key itself and sends it only with its API calls (``/v1/systemone`` and the forwarded
``/upstream/...`` routes), each of which checks it.
"""

from __future__ import annotations

from importlib import resources

from litestar import Response, get
from litestar.handlers import HTTPRouteHandler

# text types get "; charset=utf-8" from Litestar
MEDIA_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}
# the page loads its own files and talks to its own origin, nothing else
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
    "Referrer-Policy": "no-referrer",
}


def static_files() -> dict[str, bytes]:
    """Every file of ``gateway/static``, by name, read once."""
    folder = resources.files(__package__).joinpath("static")
    return {
        entry.name: entry.read_bytes()
        for entry in folder.iterdir()
        if entry.is_file() and any(entry.name.endswith(ext) for ext in MEDIA_TYPES)
    }


def page_routes() -> list[HTTPRouteHandler]:
    """``GET /`` (the page) and ``GET /static/<name>`` (its script and stylesheet)."""
    files = static_files()

    def file_response(name: str) -> Response:
        media_type = next(m for ext, m in MEDIA_TYPES.items() if name.endswith(ext))
        return Response(content=files[name], media_type=media_type, headers=HEADERS)

    def handler(path: str, name: str) -> HTTPRouteHandler:
        @get(path, include_in_schema=False)
        async def serve_file() -> Response:
            return file_response(name)

        return serve_file

    return [handler("/", "index.html"), *(handler(f"/static/{name}", name) for name in sorted(files))]
