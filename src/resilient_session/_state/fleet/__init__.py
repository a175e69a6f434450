"""Sharing per-host state across worker processes through Redis: the backend, the exchange of
each sync, the Lua scripts, the sync thread and the guards that note what changed."""
