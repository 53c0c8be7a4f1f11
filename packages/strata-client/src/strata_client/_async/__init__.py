"""The client's I/O: connection pool, resources, streams.

``strata_client._async`` is the source; ``strata_client._sync`` is generated from it by
``packages/strata-client/scripts/unasync.py``. Edit the async files, then regenerate.
"""
