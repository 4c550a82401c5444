"""Pop consumption (RocketMQ 5's SimpleConsumer) on the broker: receipt handles, the revive log, revival.

* :mod:`.receipt` — signed, opaque receipt handles;
* :mod:`.records` — checkpoint and ack records of the revive log (``rmq_sys_REVIVE_LOG_<cluster>``);
* :mod:`.revive` — :class:`PopState` (open checkpoints, rebuilt from the revive log) and the
  revive service that brings unacked messages back (a master-only service);
* :mod:`.handlers` — POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME.
"""

__all__: list[str] = []
