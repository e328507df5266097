"""The web dashboard in a real headless Chromium (Debian's chromium + chromium-driver,
driven by Selenium) against an API server on loopback: login, RBAC, a preempted managed
job's timeline and live logs, cancel from the UI, escaping. Screenshots of the job and
cost pages are saved under the test's tmp dir (`dashboard-*.png`)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.conftest import Server, cli, task_file
from tests.waiting import wait_until

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SECRET = "dashboard-secret-value-0xBADC0DE"
XSS = "<script>window.pwned=1</script>"

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed "
                                "(pip install -e '.[test]')")
if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
    pytest.skip("chromium and chromedriver are not installed "
                "(apt-get install -y chromium chromium-driver)", allow_module_level=True)

from selenium.common.exceptions import (  # noqa: E402
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture
def browser(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--window-size=1280,1400",
                f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    try:
        yield driver
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:  # keep what the browser showed
            driver.save_screenshot(str(tmp_path / "failure.png"))
            (tmp_path / "failure.html").write_text(driver.page_source)
            print(f"browser at {driver.current_url}; screenshot and page in {tmp_path}")
    finally:
        driver.quit()
        shutil.rmtree(tmp_path / "chromium-profile", ignore_errors=True)


def login(driver: Any, server: Server, token: str) -> None:
    driver.delete_all_cookies()
    driver.get(f"{server.url}/dashboard/login")
    driver.find_element(By.ID, "token").send_keys(token)
    button = driver.find_element(By.ID, "login")
    button.click()
    until(driver, lambda _d: _gone(button))  # the answer to the POST has loaded


def _gone(element: Any) -> bool:
    """Whether `element` left the document (a new page loaded). chromedriver says so with
    a stale-element error or, when it asks mid-navigation, with "does not belong to the
    document" (which ec.staleness_of does not catch)."""
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" not in str(exc):
            raise
        return True
    return False


def _fresh(call: Any) -> Any:
    """`call()`, again if the element went stale: live parts of a page (the job's facts
    and timeline, the lists, a cluster's node table) are replaced every 2 s, sometimes
    while chromedriver reads one (it then says the node "does not belong to the
    document")."""
    for _ in range(20):
        try:
            return call()
        except StaleElementReferenceException:
            continue
        except WebDriverException as exc:
            if "does not belong to the document" not in str(exc):
                raise
    return call()


def text(driver: Any, css: str) -> str:
    return str(_fresh(lambda: driver.find_element(By.CSS_SELECTOR, css).text))


def click(driver: Any, by: str, value: str) -> None:
    _fresh(lambda: driver.find_element(by, value).click())


def texts(driver: Any, css: str, attr: str | None = None) -> list[str]:
    """Each matching element's text (or `attr`), read in one go in the page."""
    got = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map("
        "e => arguments[1] ? e.getAttribute(arguments[1]) : e.textContent)", css, attr)
    return [str(x) for x in got]


def until(driver: Any, cond: Any, timeout: float = 30) -> Any:
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(cond)


def _job(server: Server) -> dict[str, Any]:
    r = server.embedded("jobs", "queue", "--json")
    assert r.rc == 0, r.err
    return dict(json.loads(r.out)[0])


def test_login_refuses_a_wrong_token_and_shows_no_data(server: Server, browser: Any) -> None:
    browser.get(f"{server.url}/dashboard/jobs")  # no session: the login page, not data
    assert browser.current_url.endswith("/dashboard/login")
    assert browser.find_elements(By.ID, "jobs") == []
    login(browser, server, "lk_not-a-real-token")
    assert "not accepted" in text(browser, "#error")
    assert browser.find_elements(By.ID, "jobs") == [] and browser.get_cookies() == []
    login(browser, server, server.tokens["alice"])
    until(browser, ec.presence_of_element_located((By.ID, "jobs")))
    assert "No managed jobs." in text(browser, "#jobs")
    (cookie,) = browser.get_cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    # a POST without the page's CSRF token is refused, even with the session cookie
    with httpx.Client(base_url=server.url, cookies={cookie["name"]: cookie["value"]}) as c:
        assert c.post("/dashboard/logout", data={"csrf": "forged"}).status_code == 403
        assert c.get("/dashboard/clusters").status_code == 200
    browser.find_element(By.CSS_SELECTOR, "header button").click()  # log out
    until(browser, ec.url_contains("/dashboard/login"))
    browser.get(f"{server.url}/dashboard/clusters")
    assert browser.current_url.endswith("/dashboard/login")


def test_job_life_rbac_logs_and_cancel(server: Server, browser: Any, tmp_path: Path) -> None:
    alice = server.client("alice")
    task = Path(task_file(tmp_path, count=900, step=0.1, secret=True))
    task.write_text(task.read_text().replace("run: |\n", f"run: |\n  echo '{XSS}'\n"))
    sub = cli(alice, "jobs", "launch", str(task), "-y", "-d", "--name", f"train{XSS}",
              "--secret", f"API_KEY={SECRET}")
    assert sub.rc == 0, sub.err
    wait_until(lambda: _job(server)["status"] == "RUNNING", timeout=30, what="job running")
    first = _job(server)["cluster"]
    assert server.embedded("local", "preempt", str(first)).rc == 0
    wait_until(lambda: _job(server)["recoveries"] == 1 and _job(server)["status"] == "RUNNING",
               timeout=45, what="recovered on a new cluster")

    # alice: her job in the list, and its page: two attempts, the preemption, the recovery
    login(browser, server, server.tokens["alice"])
    until(browser, ec.presence_of_element_located((By.ID, "jobs")))
    assert f"train{XSS}" in text(browser, "#jobs")  # the name shows as text
    click(browser, By.CSS_SELECTOR, "#jobs a[href='/dashboard/jobs/1']")
    until(browser, ec.presence_of_element_located((By.ID, "timeline")))
    assert text(browser, "#attempts") == "2" and text(browser, "#recoveries") == "1"
    assert texts(browser, "#timeline g.attempt", "data-outcome") == ["PREEMPTED", "RUNNING"]
    assert len(texts(browser, "#timeline g.preemption")) == 1
    (gap,) = texts(browser, "#timeline g.gap > text")
    assert gap.startswith("recovery ")
    # the recovery in its phases, each with its time (the controller's RUNNING event)
    assert texts(browser, "#timeline g.gap rect.phase", "data-phase") == [
        "detection", "teardown", "relaunch", "setup"]
    assert all(float(s) >= 0 for s in texts(browser, "#timeline rect.phase", "data-seconds"))
    assert "RECOVERING" in text(browser, "#events")
    # the log streams in live: both attempts' headers, then lines still being written
    until(browser, lambda d: "=== attempt 2" in text(d, "#log") and "count 3" in
          text(d, "#log").split("=== attempt 2")[1])
    seen = text(browser, "#log").count("count ")
    until(browser, lambda d: text(d, "#log").count("count ") > seen + 5, timeout=15)
    assert XSS in text(browser, "#log")  # a log line with markup shows as text ...
    assert browser.execute_script("return window.pwned") is None  # ... and never runs
    assert SECRET not in browser.page_source
    browser.save_screenshot(str(tmp_path / "dashboard-job.png"))

    # bob sees none of it; alice's job page is "not found" for him
    login(browser, server, server.tokens["bob"])
    until(browser, ec.presence_of_element_located((By.ID, "jobs")))
    assert "No managed jobs." in text(browser, "#jobs")
    browser.get(f"{server.url}/dashboard/clusters")
    assert "No clusters." in text(browser, "#clusters")
    browser.get(f"{server.url}/dashboard/jobs/1")
    assert "No managed job with id 1" in text(browser, "main")
    assert browser.find_elements(By.ID, "timeline") == []

    # the admin sees alice's job and cluster, and cancels the job from its page
    login(browser, server, server.tokens["admin"])
    until(browser, ec.presence_of_element_located((By.ID, "jobs")))
    assert "alice" in text(browser, "#jobs")
    browser.get(f"{server.url}/dashboard/clusters")
    now_on = str(_job(server)["cluster"])
    assert now_on in text(browser, "#clusters") and "alice" in text(browser, "#clusters")
    click(browser, By.LINK_TEXT, now_on)  # its page: queue, then a job's log
    until(browser, ec.presence_of_element_located((By.ID, "queue")))
    assert "RUNNING" in text(browser, "#queue")
    assert f"{now_on}-0" in text(browser, "#nodes")  # rank 0, with its address
    browser.find_element(By.CSS_SELECTOR, "#queue a").click()
    until(browser, lambda d: "count 2" in text(d, "#log"))
    browser.get(f"{server.url}/dashboard/jobs/1")
    click(browser, By.ID, "cancel")
    until(browser, ec.alert_is_present()).accept()
    until(browser, lambda d: text(d, "#status") == "CANCELLED", timeout=30)
    assert browser.find_elements(By.ID, "cancel") == []
    assert json.loads(cli(alice, "jobs", "queue", "--json").out)[0]["status"] == "CANCELLED"
    browser.get(f"{server.url}/dashboard/cost")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#cost-lines tr")) >= 3  # 2 attempts
    browser.save_screenshot(str(tmp_path / "dashboard-cost.png"))


def test_cluster_page_node_states_follow_a_preemption_without_a_reload(
        server: Server, browser: Any, tmp_path: Path) -> None:
    alice = server.client("alice")
    task = tmp_path / "two.yaml"
    task.write_text("name: two\nnum_nodes: 2\nresources:\n  infra: local\n  use_spot: true\n"
                    "run: sleep 600\n")
    r = cli(alice, "launch", str(task), "-c", "duo", "-y", "-d")
    assert r.rc == 0, r.out + r.err
    login(browser, server, server.tokens["alice"])
    browser.get(f"{server.url}/dashboard/clusters/duo")
    until(browser, ec.presence_of_element_located((By.ID, "nodes")))
    # state (the cluster's: nothing newer reported), then the launch's health gate finding
    assert [s.strip() for s in texts(browser, "#nodes tr[data-node] .st")] == [
        "up", "ok", "up", "ok"]
    browser.execute_script("window.stayed = 1")  # gone if the page is loaded again
    assert server.embedded("local", "preempt", "duo", "--node", "1").rc == 0

    def row(node: str) -> str:  # read in the page in one go: the table is replaced every 2 s
        return " ".join(" ".join(texts(browser, f"#nodes tr[data-node='{node}']")).split())

    until(browser, lambda _: "preempted" in row("duo-1"))
    assert "local (local preempt)" in row("duo-1")
    assert row("duo-0").startswith("0duo-0 up local (local preempt)")  # only node 1 went
    assert "PREEMPTED" in " ".join(texts(browser, "#cluster-now"))  # followed too
    assert browser.execute_script("return window.stayed") == 1
    browser.save_screenshot(str(tmp_path / "dashboard-cluster.png"))
