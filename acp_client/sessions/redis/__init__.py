"""The several-workers session store on Redis/Valkey: the store (``_store``: records and fenced writes), its
lease book (``_leases``), the link to the server (``_link``: connection, retries, epoch, pipelines) and the Lua
scripts (``_scripts``)."""

from acp_client.sessions.redis._store import RedisSessionStore

__all__ = ["RedisSessionStore"]
