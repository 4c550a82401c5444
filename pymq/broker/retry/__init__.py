"""Retry and dead letters: the decision (``policy``) and the consumer's send-back (``sendback``).

Where a message that failed goes: ``%RETRY%<group>`` with a delay level, or ``%DLQ%<group>``
once it has been consumed its group's limit of times. Pop's revival uses the same decision.
"""

from pymq.broker.retry.policy import DEFAULT_MAX_RECONSUME_TIMES, dead_letter_if_exhausted, exhausted, retry_limit

__all__ = ["DEFAULT_MAX_RECONSUME_TIMES", "dead_letter_if_exhausted", "exhausted", "retry_limit"]
