"""The control-plane service: `launcher api start` runs it (FastAPI + uvicorn, the
optional `launcher[server]` extra).

Layout (a thin skin over `launcher.api`, as the CLI is; see docs/api-server.md):

- `settings.py`   where the server keeps its files under `LAUNCHER_HOME/server/`, limits;
- (`launcher/api/server_store.py`: users, token hashes, owners, audit, requests)
- `process.py`    `api start|stop|status|logs`: the daemon's life (imports no FastAPI);
- `app.py`        the FastAPI application: auth, limits, routers, the controller;
- `store_pool.py` one ServerStore per worker thread, kept across requests;
- `auth.py`       bearer tokens -> the acting user; failed-auth rate limit;
- `controller.py` the managed-jobs controller running inside the server process;
- `requests.py`   long requests (a managed-job launch) run asynchronously, with a log;
- `routers/`      one module per resource; each route authenticates, parses, calls a
                  `launcher.api` function (or a store method) and returns its result.

Nothing outside this package imports it except `launcher.cli.api_cmds`.
"""
