"""The operators' web dashboard (issue 33): ``pymq-dashboard --namesrv ADDR``, on by default in ``pymq-local``.

A Starlette app on uvicorn with server-rendered Jinja2 pages. Every page reads the admin RPCs
through :class:`pymq.client.admin.AdminClient` (the same calls ``pymq-admin`` makes); the
charts come from the dashboard's own periodic polls (:mod:`pymq.dashboard.poller`).

Modules: ``app`` (the app factory and routes), ``pages_*`` (one module per page family),
``guard`` (sessions, login, CSRF, read-only), ``poller``/``history``/``charts`` (the charts),
``views`` (pure formatting), ``server`` (uvicorn inside our event loop: a daemon object).
"""
