"""The keyless routes: behind the key with `key_on_every_route` (/health never), and on a pool
of their own that refuses (429) beyond its bound instead of queueing without one."""

from __future__ import annotations

import asyncio
import threading

import pytest
from litestar.testing import TestClient

from strata_server import ServerSettings, create_app
from strata_server.errors import ApiError
from strata_server.open_routes import OpenPool

KEYED = {"authorization": "Bearer sekrit"}
OPEN_ROUTES = [
    ("POST", "/tokenize", {"prompt": "hello"}),
    ("POST", "/detokenize", {"tokens": [104, 105]}),
    ("GET", "/tokenizer_info", None),
    ("GET", "/version", None),
    ("GET", "/metrics", None),
]


@pytest.mark.parametrize(("method", "path", "body"), OPEN_ROUTES)
def test_key_on_every_route_guards_all_but_health(make_engine, method: str, path: str, body) -> None:
    settings = ServerSettings(api_key="sekrit", key_on_every_route=True)
    with TestClient(create_app(make_engine(), settings)) as client:
        assert client.request(method, path, json=body).status_code == 401
        assert client.request(method, path, json=body, headers=KEYED).status_code == 200
        assert client.get("/health").status_code == 200
    with TestClient(create_app(make_engine(), ServerSettings(api_key="sekrit"))) as client:
        assert client.request(method, path, json=body).status_code == 200  # the default: open


def test_the_open_pool_refuses_beyond_its_bound() -> None:
    release = threading.Event()

    async def main() -> None:
        pool = OpenPool(threads=1, queue=1)
        held = [asyncio.ensure_future(pool.run(release.wait)) for _ in range(2)]
        await asyncio.sleep(0.05)
        with pytest.raises(ApiError) as refused:
            await pool.run(lambda: True)
        assert refused.value.status == 429 and refused.value.headers["Retry-After"]
        release.set()
        assert await asyncio.gather(*held) == [True, True]
        assert await pool.run(lambda: 7) == 7  # room again
        pool.close()

    asyncio.run(main())
