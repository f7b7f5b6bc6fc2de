"""The browser half of jupyterhub_spawner_test.sh: headless Chromium, driven over the DevTools
protocol (python3-websocket), logs two Unix users in to a JupyterHub whose spawner is gpuq's and
checks what they see.
    jupyterhub_browser.py HUB_URL GPUQ SOCKET WORK USER1 PASSWORD1 USER2 PASSWORD2
Exits 1 with the first failed check (and the page's text) on stderr.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from typing import Any, Callable

import websocket  # python3-websocket

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--remote-debugging-port=0", "about:blank"]
# The cell: a kernel of the user's server says which GPUs its process may use.
CELL = "import os; print(os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>'))"


class Failure(Exception):
    pass


class CdpError(Exception):
    """A DevTools call refused, as while a page navigates away: waits look again."""


def wait_for(seconds: float, what: str, probe: Callable[[], Any]) -> Any:
    """Calls probe until it returns something true, or fails naming what it waited for."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            got = probe()
        except (websocket.WebSocketException, OSError, CdpError):
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            raise Failure(f"waited {seconds:.0f} s for {what}")
        time.sleep(0.3)


class Browser:
    """One Chromium with its own profile (so its own cookies: one per user) and one page."""

    def __init__(self, chromium: str, profile: str) -> None:
        os.makedirs(profile, exist_ok=True)
        log = open(os.path.join(profile, "chromium.log"), "w")
        self.proc = subprocess.Popen([chromium, f"--user-data-dir={profile}", *CHROMIUM_FLAGS],
                                     stdout=log, stderr=subprocess.STDOUT)
        port_file = os.path.join(profile, "DevToolsActivePort")
        port = wait_for(30, "Chromium's DevTools port", lambda: os.path.exists(port_file)
                        and open(port_file).readline().strip())
        pages = wait_for(30, "Chromium's page", lambda: [t for t in json.load(urllib.request.urlopen(
            f"http://127.0.0.1:{port}/json/list", timeout=5)) if t["type"] == "page"])
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=120,
                                              suppress_origin=True)
        self.next_id = 0

    def call(self, method: str, **params: Any) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise CdpError(f"{method}: {reply['error']}")
                return reply["result"]

    def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited when it is a promise)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            return None  # the page is changing under us: callers wait and look again
        return result["result"].get("value")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        wait_for(60, f"{url} to load", lambda: self.eval("document.readyState") == "complete")

    def path(self) -> str:
        return self.eval("location.pathname + location.search") or ""

    def text(self) -> str:
        return self.eval("document.body ? document.body.innerText : ''") or ""

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def login(b: Browser, hub: str, user: str, password: str) -> None:
    b.goto(f"{hub}/hub/login")
    b.eval(f"document.getElementById('username_input').value = {json.dumps(user)};"
           f"document.getElementById('password_input').value = {json.dumps(password)};"
           "document.getElementById('login_submit').click(); true")
    wait_for(30, f"{user}'s options form after login", lambda: b.eval(
        "!!document.getElementById('spawn_form') && document.readyState == 'complete'"))


def submit_form(b: Browser, gpus: str, time_limit: str) -> None:
    """Fills the options form, posts it, and waits for the page that answers; form.submit()
    skips the browser's own checks of the number field, so the hub sees exactly these values."""
    b.eval(f"document.getElementById('gpus').value = {json.dumps(gpus)};"
           f"document.getElementById('time').value = {json.dumps(time_limit)};"
           "window.gpuqFormPage = true; document.getElementById('spawn_form').submit(); true")
    # The hub answers the post when the server is up or after its slow_spawn_timeout (10 s).
    wait_for(60, f"the hub's answer to gpus={gpus!r} time={time_limit!r}", lambda: b.eval(
        "window.gpuqFormPage === undefined && document.readyState == 'complete'"))


def check_bad_option(b: Browser, gpus: str, time_limit: str, expected: str) -> None:
    submit_form(b, gpus, time_limit)
    text = wait_for(30, f"the hub's answer to gpus={gpus!r} time={time_limit!r}", lambda: (
        b.eval("!!document.getElementById('spawn_form') && document.readyState == 'complete'")
        and "Error:" in b.text() and b.text()))
    if expected not in text or "Traceback" in text:
        raise Failure(f"gpus={gpus!r} time={time_limit!r}: expected {expected!r} above the form, "
                      f"the page says:\n{text}")
    print(f"ok: the hub shows {expected!r} for gpus={gpus!r} time={time_limit!r}")


def check_rest_option(b: Browser, user: str) -> None:
    """A start through the hub's REST API (from the user's hub page, with its cookie) with a bad
    option is refused with the spawner's message, not a bare HTTP 500."""
    answer = b.eval("""fetch('/hub/api/users/%s/server', {method: 'POST', body: '{"gpus": "abc"}',
                         headers: {'Content-Type': 'application/json'}})
                     .then(async r => r.status + ' ' + await r.text())""" % user) or ""
    if not answer.startswith("400 ") or "GPUs: 'abc' is not a whole number" not in answer:
        raise Failure(f"REST start of {user} with gpus=abc answered: {answer}")
    print(f"ok: a REST start with gpus=abc is refused: {answer}")


def wait_for_server(b: Browser, user: str, seconds: float) -> None:
    def up() -> bool:
        on_form = b.path().startswith("/hub/spawn") and not b.path().startswith("/hub/spawn-pending")
        if "Spawn failed" in b.text() or (on_form and "Error:" in b.text()):
            raise Failure(f"{user}'s spawn failed:\n{b.text()}")
        return b.path().startswith(f"/user/{user}/tree") and b.eval("document.readyState") == "complete"
    wait_for(seconds, f"{user}'s Jupyter server (the tree page)", up)


def run_cell(b: Browser, user: str) -> str:
    """Starts a kernel on the user's server and runs CELL in it, from the user's page (its
    cookies and XSRF token): the REST API for the kernel, its websocket for the cell."""
    script = """(async () => {
      const base = '/user/%(user)s/';
      const xsrf = decodeURIComponent((document.cookie.match(/(?:^|; )_xsrf=([^;]*)/) || [])[1] || '');
      const r = await fetch(base + 'api/kernels', {method: 'POST', body: '{}',
                            headers: {'X-XSRFToken': xsrf, 'Content-Type': 'application/json'}});
      if (!r.ok) return 'HTTP ' + r.status + ': ' + await r.text();
      const kernel = await r.json();
      const ws = new WebSocket('ws://' + location.host + base + 'api/kernels/' + kernel.id + '/channels');
      return await new Promise((resolve) => {
        let out = '';
        const id = 'gpuq-test-' + Date.now();
        setTimeout(() => resolve('no answer from the kernel in 60 s; output so far: ' + out), 60000);
        ws.onerror = () => resolve('websocket error');
        ws.onopen = () => ws.send(JSON.stringify({channel: 'shell', parent_header: {}, metadata: {},
          header: {msg_id: id, username: '', session: 'gpuq-test', msg_type: 'execute_request',
                   version: '5.3', date: new Date().toISOString()},
          content: {code: %(code)s, silent: false, store_history: false, user_expressions: {},
                    allow_stdin: false}}));
        ws.onmessage = (e) => {
          const m = JSON.parse(e.data);
          if (m.parent_header.msg_id !== id) return;
          if (m.msg_type === 'stream') out += m.content.text;
          if (m.msg_type === 'error') out += 'ERROR ' + m.content.ename + ': ' + m.content.evalue;
          if (m.msg_type === 'status' && m.content.execution_state === 'idle') { ws.close(); resolve(out); }
        };
      });
    })()""" % {"user": user, "code": json.dumps(CELL)}
    return (b.eval(script) or "").strip()


def gpuq_run(gpuq: str, socket: str, *args: str) -> str:
    return subprocess.run([gpuq, *args], check=True, capture_output=True, text=True,
                          env={**os.environ, "GPUQ_SOCKET": socket}).stdout


def gpuq_jobs(gpuq: str, socket: str, user: str) -> list[dict]:
    return [j for j in json.loads(gpuq_run(gpuq, socket, "queue", "--json")) if j["user"] == user]


def job_gpus(gpuq: str, socket: str, user: str) -> str:
    running = [j for j in gpuq_jobs(gpuq, socket, user) if j["state"] == "RUNNING"]
    if len(running) != 1:
        raise Failure(f"{user} has {len(running)} running gpuq jobs, expected 1: {running}")
    return ",".join(str(g) for g in running[0]["gpus"])


def check_cell(b: Browser, gpuq: str, socket: str, user: str) -> str:
    gpus = job_gpus(gpuq, socket, user)
    got = run_cell(b, user)
    if not gpus or got != gpus:
        raise Failure(f"{user}'s cell printed CUDA_VISIBLE_DEVICES {got!r}; gpuq gave GPUs {gpus!r}")
    print(f"ok: {user}'s cell printed CUDA_VISIBLE_DEVICES={got}, the GPU gpuq gave its job")
    return gpus


def check_waiting(b: Browser, user: str) -> None:
    """The spawn-pending page says the server waits for a GPU, with its position and start."""
    pattern = re.compile(r"waiting for a GPU: position \d+ \(Resources\), expected start \d\d:\d\d")
    message = wait_for(60, f"{user}'s pending page to say it waits for a GPU", lambda: (
        b.path().startswith(f"/hub/spawn-pending/{user}")
        and pattern.search(b.eval("(document.getElementById('progress-message') || {}).innerText") or "")
        and b.eval("document.getElementById('progress-message').innerText")))
    print(f"ok: {user}'s pending page says: {message}")


def stop_server(b: Browser, hub: str, gpuq: str, socket: str, user: str) -> None:
    b.goto(f"{hub}/hub/home")
    wait_for(30, f"{user}'s Stop My Server button", lambda: b.eval(
        "!!document.getElementById('stop') && getComputedStyle(document.getElementById('stop')).display != 'none'"))
    def ended() -> bool:
        return not [j for j in gpuq_jobs(gpuq, socket, user) if j["state"] in ("PENDING", "RUNNING")]
    # The button's handler comes with the page's scripts (RequireJS), which may still be loading
    # when the page says it is complete: click again until the hub acts (a second stop is a no-op).
    deadline = time.monotonic() + 90
    while True:
        b.eval("document.getElementById('stop').click(); true")
        try:
            wait_for(5, "", ended)
            break
        except Failure:
            if time.monotonic() > deadline:
                raise Failure(f"waited 90 s for {user}'s gpuq job to end after Stop My Server")
    print(f"ok: {user}'s server stopped from the hub's home page; its gpuq job ended")


def check_budget_and_cancel(b: Browser, hub: str, gpuq: str, socket: str, user: str) -> None:
    """With a budget too small for the job, the pending page says the budget is spent; a
    `gpuq cancel` of the waiting job fails the spawn with the job's end on the page."""
    gpuq_run(gpuq, socket, "budget", "set", user, "0.05", "--per", "week")
    b.goto(f"{hub}/hub/spawn/{user}")
    wait_for(30, f"{user}'s options form", lambda: b.eval("!!document.getElementById('spawn_form')"))
    submit_form(b, "1", "10")  # 10 GPU-minutes: past a budget of 3
    message = wait_for(60, f"{user}'s pending page to say the budget is spent", lambda: (
        "GPU-hour budget is spent" in (b.eval(
            "(document.getElementById('progress-message') || {}).innerText") or "")
        and b.eval("document.getElementById('progress-message').innerText")))
    print(f"ok: {user}'s pending page says: {message}")
    job = [j for j in gpuq_jobs(gpuq, socket, user) if j["state"] == "PENDING"]
    if len(job) != 1 or job[0]["reason"] != "AssocGrpGRESMinutes":
        raise Failure(f"{user}'s waiting job is not held by the budget: {job}")
    gpuq_run(gpuq, socket, "cancel", job[0]["display_id"])
    text = wait_for(60, f"{user}'s page to say the spawn failed", lambda: (
        "Spawn failed" in b.text() and b.text()))
    if f"gpuq job {job[0]['display_id']} ended CANCELLED" not in text:
        raise Failure(f"after gpuq cancel, {user}'s page says:\n{text}")
    print(f"ok: gpuq cancel of the waiting job {job[0]['display_id']}: the hub says the spawn failed and why")


def main(argv: list[str]) -> int:
    hub, gpuq, socket, work, user1, pw1, user2, pw2 = argv[1:9]
    chromium = os.environ.get("CHROMIUM", "chromium")
    first = Browser(chromium, os.path.join(work, "chromium-1"))
    second = Browser(chromium, os.path.join(work, "chromium-2"))
    try:
        login(first, hub, user1, pw1)
        check_bad_option(first, "-1", "10", "GPUs: '-1' is not a whole number from 0 to")
        check_bad_option(first, "1", "forever", "time limit: 'forever' is not a time limit")
        check_rest_option(first, user1)
        submit_form(first, "1", "10")
        wait_for_server(first, user1, 120)
        gpus = check_cell(first, gpuq, socket, user1)

        login(second, hub, user2, pw2)
        submit_form(second, "1", "10")
        check_waiting(second, user2)
        stop_server(first, hub, gpuq, socket, user1)
        wait_for_server(second, user2, 120)
        if check_cell(second, gpuq, socket, user2) != gpus:
            raise Failure(f"{user2} did not get the one GPU {gpus} once {user1} stopped")
        stop_server(second, hub, gpuq, socket, user2)
        check_budget_and_cancel(first, hub, gpuq, socket, user1)
    except Failure as e:
        for name, b in (("first", first), ("second", second)):
            try:
                print(f"--- the {name} browser at {b.path()}:\n{b.text()[:3000]}", file=sys.stderr)
            except (websocket.WebSocketException, OSError, CdpError) as why:
                print(f"--- the {name} browser cannot say where it is: {why}", file=sys.stderr)
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    finally:
        first.close()
        second.close()
    print("OK: login, options, a queued server's position, stop and hand-over, a spent budget, "
          "through the browser")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
