"""The custom pieces that make the hot statements cheaper than plain FastAPI and SQLAlchemy,
each behind one switch, ``DEALBROKER_FAST_PATHS`` (on by default; ``app.state.fast_paths`` in
a server, ``Settings.fast_paths`` in the worker). Off, every route is a plain FastAPI route and
every statement goes through SQLAlchemy; the answers are the same byte for byte (the parity
tests run both ways).

* ``routes``: routers' routes added to the application itself (``include``), and routes whose
  requests are solved in a few fixed steps (``DirectRoute``): ``/healthz`` and the deal API.
* ``statements``: statements compiled once for asyncpg and run on connections of their own
  (``DriverStatements``): the deal get and list, the create's one statement, and the webhook
  delivery job's claim and record.

What each buys, measured end to end against a bare FastAPI route: ``bench/README.md``.
"""
