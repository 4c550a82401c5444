"""SYNC_FLUSH on the broker's side: sends answered once a disk sync covers them.

* :mod:`.group_commit` — :class:`GroupCommit`: the waiting sends, one sync for many;
* :mod:`.loop_sync` — :class:`LoopSync`: the store's C syncer driven from the loop.

The store's side (what a sync covers, the flusher thread) is ``store/sync_plan.py`` and
``store/flush.py``: the store keeps no asyncio.
"""

__all__: list[str] = []
