"""`launcher dashboard`: the dashboard over the embedded home, reached through the
one-time URL it prints on its first line."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import httpx

from tests.server.conftest import CLI, cli, free_port
from tests.waiting import wait_until


def _answers(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_one_time_url_logs_in_once_and_shows_the_homes_jobs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    port = free_port()
    proc = subprocess.Popen([*CLI, "dashboard", "--port", str(port), "--no-browser"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "LAUNCHER_HOME": str(home)})
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith(f"http://127.0.0.1:{port}/dashboard/login?once=")
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: _answers(port), timeout=20, what="the dashboard listening")
        with httpx.Client(base_url=base) as anon:  # no code: the login page, not data
            r = anon.get("/dashboard/jobs", follow_redirects=True)
            assert r.url.path == "/dashboard/login" and 'id="token"' in r.text
        with httpx.Client() as browser:
            page = browser.get(url, follow_redirects=True)
            assert page.status_code == 200 and page.url.path == "/dashboard/jobs"
            assert "local (admin)" in page.text and "No managed jobs." in page.text
            cookie = browser.cookies.get("launcher_session")
            assert cookie and cookie not in url  # the session is not the code in the URL
        with httpx.Client() as replay:  # the same URL again: refused
            again = replay.get(url, follow_redirects=True)
            assert again.status_code == 401 and "already used" in again.text
            assert "launcher_session" not in replay.cookies
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)


def test_a_port_in_use_is_refused_in_one_paragraph(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = cli(tmp_path, "dashboard", "--port", str(port), "--no-browser")
    assert r.rc != 0 and f"--port {port}" in r.err and "Traceback" not in r.err
