"""gpuq_spawner: a JupyterHub spawner that runs each user's Jupyter server as a gpuq job.

    c.JupyterHub.spawner_class = "gpuq_spawner.GpuqSpawner"   (packaging/jupyterhub_config.py)

`start` submits `jupyterhub-singleuser` to gpuq as the logged-in Unix user: the hub runs as root
and runs the gpuq client through `runuser -u USER --` (util-linux, always on Debian; no sudoers
rule needed), so the daemon attributes the job to the user by SO_PEERCRED as for any submission.
The job gets only the hub's variables that JupyterHub itself hands a single-user server
(`Spawner.get_env`: JUPYTERHUB_API_TOKEN, JUPYTERHUB_SERVICE_PREFIX, ... and `env_keep`),
through the client's environment, never its command line, so no other user sees the token in
`ps`. The job picks a free port itself when it starts (a queued job may wait for hours: a port
chosen at submit could be taken by then), writes `gpuq-spawner: port N` at the top of its
output file, and the spawner reads it with `gpuq log`. While the job waits, `progress` shows its
position and expected start from `gpuq show --json`; `poll` follows the job's state and `stop`
cancels it (`gpuq cancel`). Options (GPUs, time limit, a container image where podman or
apptainer exist) are checked by `parse_options`, whose errors the hub shows as they are.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from html import escape
from typing import Any, Mapping, Optional

from jupyterhub.spawner import Spawner
from tornado.web import HTTPError
from traitlets import Dict, Float, Integer, List, Unicode, default

ACTIVE_STATES = ("PENDING", "RUNNING")
PORT_LINE = re.compile(r"^gpuq-spawner: port (\d+)$", re.MULTILINE)
# gpuq's --time forms (README "#SBATCH directives"): M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
TIME_FORMS = (
    (re.compile(r"^(\d+)$"), ("m",)),
    (re.compile(r"^(\d+):(\d+)$"), ("m", "s")),
    (re.compile(r"^(\d+):(\d+):(\d+)$"), ("h", "m", "s")),
    (re.compile(r"^(\d+)-(\d+)$"), ("d", "h")),
    (re.compile(r"^(\d+)-(\d+):(\d+)$"), ("d", "h", "m")),
    (re.compile(r"^(\d+)-(\d+):(\d+):(\d+)$"), ("d", "h", "m", "s")),
)
SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
IMAGE_NAME = re.compile(r"^[A-Za-z0-9/][A-Za-z0-9._/:@+=-]*$")
BUDGET_REASON = "AssocGrpGRESMinutes"
LOG_GRACE_SECONDS = 60  # how long a running job's output file may stay unreadable
STOP_SECONDS = 60  # gpuq's SIGKILL follows SIGTERM after --kill-wait (30 s)


class GpuqSpawnerError(HTTPError):
    """An error whose text the hub shows the user as it is (no traceback): above the options
    form, on the spawn-pending page, or as the REST API's message. An HTTPError, because the hub
    shows any other exception raised within a second of a spawn as a bare `HTTP 500`."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(status, "%s", message)  # "%s": a message may hold a '%' (%j)
        self.message = message

    def __str__(self) -> str:
        return self.message

    # JupyterHub 3 shows `jupyterhub_message` on the spawn-failed page when an exception has it.
    @property
    def jupyterhub_message(self) -> str:
        return self.message


@dataclass(frozen=True)
class JobOptions:
    """What a user chose on the options form, checked."""

    gpus: int
    time: str  # gpuq's --time syntax
    image: str = ""  # empty: no container


def _one(raw: Mapping[str, Any], key: str) -> str:
    """A form field's value: forms give lists of strings, the REST API plain values."""
    value = raw.get(key, "")
    if isinstance(value, (list, tuple)):
        value = value[0] if value else ""
    return str(value).strip()


def time_limit_seconds(text: str) -> Optional[int]:
    """Seconds of a gpuq --time value, or None when it is not one."""
    for pattern, units in TIME_FORMS:
        match = pattern.match(text)
        if match:
            return sum(int(v) * SECONDS[u] for v, u in zip(match.groups(), units))
    return None


def parse_gpus(text: str, max_gpus: int) -> int:
    if not re.fullmatch(r"\d+", text) or int(text) > max_gpus:
        raise GpuqSpawnerError(
            f"GPUs: {text!r} is not a whole number from 0 to {max_gpus}")
    return int(text)


def parse_time(text: str, default_time: str, max_seconds: int) -> str:
    text = text or default_time
    seconds = time_limit_seconds(text)
    if seconds is None or seconds == 0:
        raise GpuqSpawnerError(
            f"time limit: {text!r} is not a time limit; write minutes (90), H:MM:SS (2:00:00) "
            f"or D-HH:MM:SS (1-00:00:00)")
    if seconds > max_seconds:
        raise GpuqSpawnerError(
            f"time limit: {text!r} is longer than this hub allows ({max_seconds / 3600:g} hours)")
    return text


def parse_image(text: str, runtimes: list[str]) -> str:
    if not text:
        return ""
    if not runtimes:
        raise GpuqSpawnerError(
            f"container image {text!r}: this machine has no podman or apptainer to run it")
    if not IMAGE_NAME.match(text):
        raise GpuqSpawnerError(
            f"container image {text!r}: expected an image name or a path (letters, digits, "
            f"and . _ / : @ + = -)")
    return text


def parse_options(raw: Mapping[str, Any], max_gpus: int, default_time: str, max_seconds: int,
                  runtimes: list[str], default_gpus: int = 0) -> JobOptions:
    """Checks the options form's (or the REST API's) fields; raises GpuqSpawnerError naming the
    field and the value."""
    # Names with a leading underscore are the hub's own (JupyterHub 4 posts the form's _xsrf).
    unknown = sorted(k for k in set(raw) - {"gpus", "time", "image"} if not k.startswith("_"))
    if unknown:
        raise GpuqSpawnerError(f"unknown option(s) {', '.join(unknown)}: expected gpus, time, image")
    return JobOptions(gpus=parse_gpus(_one(raw, "gpus") or str(default_gpus), max_gpus),
                      time=parse_time(_one(raw, "time"), default_time, max_seconds),
                      image=parse_image(_one(raw, "image"), runtimes))


def container_lines(runtime: str, image: str, home: str) -> tuple[list[str], str]:
    """Shell lines and the command prefix that run the server inside `image`, as gpurun
    --container does (README): apptainer passes the environment, home and work dir through;
    podman gets the job's GPUs as CDI devices, numbered from 0 inside as CUDA numbers them."""
    if runtime == "apptainer":
        return [], f"apptainer exec --nv {shlex.quote(image)}"
    setup = [
        "set --; n=0; visible=",
        'for g in $(echo "$CUDA_VISIBLE_DEVICES" | tr , " "); do',
        '  set -- "$@" "--device=nvidia.com/gpu=$g"; visible="$visible${visible:+,}$n"; n=$((n + 1))',
        "done",
    ]
    volume = shlex.quote(f"--volume={home}:{home}")
    workdir = shlex.quote(f"--workdir={home}")
    return setup, (f'podman run --rm --network=host --ipc=host --userns=keep-id --env-host '
                   f'"$@" --env=CUDA_VISIBLE_DEVICES="$visible" {volume} {workdir} '
                   f'{shlex.quote(image)}')


def job_script(python: str, ip: str, base_url: str, command: list[str],
               container: tuple[list[str], str] = ([], "")) -> str:
    """The batch script: pick a free port, say it, and exec the server on it."""
    pick = "import socket; s = socket.socket(); s.bind(('%s', 0)); print(s.getsockname()[1])" % ip
    setup, prefix = container
    exec_line = " ".join(([prefix] if prefix else []) + [shlex.quote(c) for c in command])
    return "\n".join([
        "#!/bin/sh",
        "# gpuq_spawner: a Jupyter server for JupyterHub",
        f"port=$({shlex.quote(python)} -c {shlex.quote(pick)}) || exit 1",
        'echo "gpuq-spawner: port $port"',
        f'JUPYTERHUB_SERVICE_URL="http://{ip}:$port{base_url}"',
        "export JUPYTERHUB_SERVICE_URL",
        *setup,
        f"exec {exec_line}",
        "",
    ])


def format_start(ms: int, now: Optional[float] = None) -> str:
    """An expected start as the hub's local clock shows it: 14:20, or 2026-11-28 14:20."""
    when = datetime.fromtimestamp(ms / 1000)
    today = datetime.fromtimestamp(now if now is not None else time.time()).date()
    return when.strftime("%H:%M") if when.date() == today else when.strftime("%Y-%m-%d %H:%M")


def pending_message(job: Mapping[str, Any]) -> str:
    """What the spawn-pending page says about a job (gpuq show --json's object)."""
    state = job.get("state", "")
    if state == "RUNNING":
        gpus = ",".join(str(g) for g in job.get("gpus", [])) or "none"
        return f"gpuq job {job.get('display_id')} running (GPUs {gpus}): starting Jupyter"
    if state != "PENDING":
        return f"gpuq job {job.get('display_id')} is {state}"
    reason = job.get("reason") or "waiting"
    if reason == BUDGET_REASON:
        return (f"waiting: your GPU-hour budget is spent ({reason}); `gpuq budget` shows it, "
                f"and the job starts when an administrator raises it or the period renews")
    where = f"position {job['position']}" if job.get("position") else "position unknown"
    start = job.get("expected_start_ms") or 0
    when = f"expected start {format_start(start)}" if start else "expected start unknown"
    what = "a GPU" if job.get("gpus_requested", 0) else "a slot"
    return f"waiting for {what}: {where} ({reason}), {when}"


class GpuqSpawner(Spawner):
    """Runs the single-user server as a gpuq job of the hub user's Unix account."""

    gpuq = Unicode("gpuq", help="The gpuq client (a path, or a name on the hub's PATH).").tag(config=True)
    socket = Unicode("", help="The daemon's socket (gpuq --socket); empty: gpuq's own default "
                     "(/run/gpuq.sock for the system queue).").tag(config=True)
    run_as = List(Unicode(), ["runuser", "-u", "{username}", "--"],
                  help="Prefix that runs the gpuq client as the user ({username} is replaced); "
                  "empty when the hub runs as that user.").tag(config=True)
    max_gpus = Integer(8, help="The most GPUs one server may ask for.").tag(config=True)
    default_gpus = Integer(1, help="GPUs when the form (or a REST start) names none.").tag(config=True)
    default_time = Unicode("8:00:00", help="Time limit when the form leaves it empty.").tag(config=True)
    max_hours = Float(24, help="The longest time limit a user may ask for, in hours.").tag(config=True)
    job_name = Unicode("jupyter-{username}", help="The gpuq job name.").tag(config=True)
    output = Unicode("jupyterhub-gpuq-%j.log", help="The job's output file, relative to the "
                     "user's home (gpuq's -o patterns).").tag(config=True)
    status_interval = Float(2.0, help="Seconds between looks at the job while it starts.").tag(config=True)
    container_runtimes = List(Unicode(), ["apptainer", "podman"],
                              help="Runtimes looked for on PATH to offer the image field.").tag(config=True)
    daemon_grace = Float(120, help="Seconds the daemon may be unreachable (a restart) before a "
                         "starting server gives up; each gpuq call retries that long "
                         "(GPUQ_RETRY_SECONDS).").tag(config=True)
    umask = Unicode("", help="The server's umask, in octal (077: files only their owner reads); "
                    "empty: the hub's own. PAM sessions are not opened, so login.defs' UMASK does "
                    "not apply.").tag(config=True)
    call_timeout = Float(30, help="Seconds one gpuq call may take once the daemon answers "
                         "connections, before it is killed (a hung daemon must not hang the "
                         "hub).").tag(config=True)

    job_id = Unicode("")
    job_info = Dict()  # the job as the last look found it, for progress()
    starting = False  # inside start(): a pending job is this spawn's, not an orphan

    @default("start_timeout")
    def _start_timeout_default(self) -> int:
        return 24 * 3600  # a queued server may wait for GPUs that long; the page shows why

    @default("http_timeout")
    def _http_timeout_default(self) -> int:
        return 120

    @default("options_form")
    def _options_form_default(self):
        return GpuqSpawner.render_form

    @default("options_from_form")
    def _options_from_form_default(self):
        return self.checked_form_options

    # --- options ----------------------------------------------------------------------------
    def runtimes(self) -> list[str]:
        return [r for r in self.container_runtimes if shutil.which(r)]

    def checked_options(self, raw: Mapping[str, Any]) -> JobOptions:
        self.check_config()
        return parse_options(raw, self.max_gpus, self.default_time, int(self.max_hours * 3600),
                             self.runtimes(), min(self.default_gpus, self.max_gpus))

    def check_config(self) -> None:
        """The admin's settings agree with each other: a default time limit past max_hours made
        every spawn that kept it fail with the user's error."""
        seconds = time_limit_seconds(self.default_time)
        if not seconds or seconds > self.max_hours * 3600:
            raise GpuqSpawnerError(
                f"this hub's configuration: GpuqSpawner.default_time {self.default_time!r} is "
                f"not a time limit of at most GpuqSpawner.max_hours ({self.max_hours:g} hours); "
                f"tell the administrator", 500)

    def checked_form_options(self, formdata: Mapping[str, Any]) -> dict:
        options = self.checked_options(formdata)  # the hub shows the error above the form
        return {"gpus": str(options.gpus), "time": options.time, "image": options.image}

    def render_form(self) -> str:
        fields = [
            f'<label for="gpus">GPUs</label> <input type="number" class="form-control" '
            f'id="gpus" name="gpus" value="{min(self.default_gpus, self.max_gpus)}" min="0" '
            f'max="{self.max_gpus}">',
            f'<label for="time">Time limit (minutes, H:MM:SS or D-HH:MM:SS; at most '
            f'{self.max_hours:g} hours)</label> <input type="text" class="form-control" '
            f'id="time" name="time" value="{escape(self.default_time)}">',
        ]
        runtimes = self.runtimes()
        if runtimes:  # no runtime, no field: an image could not run
            fields.append(
                f'<label for="image">Container image ({escape(" or ".join(runtimes))}; '
                f'empty: none)</label> <input type="text" class="form-control" id="image" '
                f'name="image" value="">')
        return "\n".join(f'<div class="form-group">{f}</div>' for f in fields)

    # --- the gpuq client, as the user -------------------------------------------------------
    def client_env(self) -> dict:
        env = self.get_env()
        if self.socket:
            env["GPUQ_SOCKET"] = self.socket
        return env

    async def gpuq_call(self, *args: str, stdin: str = "", env: Optional[dict] = None) -> str:
        prefix = [p.format(username=self.user.name) for p in self.run_as]
        argv = prefix + [self.gpuq, *args]
        env = dict(env if env is not None else self.query_env())
        env["GPUQ_RETRY_SECONDS"] = str(self.daemon_grace)  # a daemon restart is waited out
        mask = self.checked_umask()  # gpuq gives the job the client's umask
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, cwd=self.home(), env=env,
                preexec_fn=None if mask is None else (lambda: os.umask(mask)))
        except OSError as e:
            raise GpuqSpawnerError(f"cannot run {argv[0]} (GpuqSpawner.run_as / gpuq): {e}") from e
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin.encode()),
                                              self.daemon_grace + self.call_timeout)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            raise GpuqSpawnerError(
                f"gpuq {args[0]} for {self.user.name} did not answer within "
                f"{self.daemon_grace + self.call_timeout:g} s (is the gpuq daemon hung?)") from None
        if proc.returncode != 0:
            raise GpuqSpawnerError(
                f"gpuq {args[0]} failed for {self.user.name}: "
                f"{err.decode(errors='replace').strip() or f'exit status {proc.returncode}'}")
        return out.decode(errors="replace")

    def checked_umask(self) -> Optional[int]:
        if not self.umask:
            return None
        if not re.fullmatch(r"0?[0-7]{3}", self.umask):
            raise GpuqSpawnerError(f"this hub's configuration: GpuqSpawner.umask {self.umask!r} is "
                                   f"not an octal umask such as 077", 500)
        return int(self.umask, 8)

    def query_env(self) -> dict:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": os.environ.get("LANG", "C.UTF-8")}
        if self.socket:
            env["GPUQ_SOCKET"] = self.socket
        return env

    def home(self) -> str:
        try:
            home = pwd.getpwnam(self.user.name).pw_dir
        except KeyError:
            raise GpuqSpawnerError(f"user {self.user.name!r} has no Unix account on this machine")
        if not os.path.isdir(home):
            raise GpuqSpawnerError(f"user {self.user.name!r}: home directory {home} does not exist")
        return home

    async def show(self) -> Optional[dict]:
        """The job as `gpuq show --json` has it; None when gpuq no longer knows it."""
        try:
            jobs = json.loads(await self.gpuq_call("show", "--json", self.job_id))
        except GpuqSpawnerError as e:
            if "invalid job id" in str(e):  # gpuq's answer for an id it does not know
                return None
            raise
        return jobs[0] if jobs else None

    # --- the Spawner interface --------------------------------------------------------------
    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.job_id = state.get("job_id", "")

    def get_state(self) -> dict:
        state = super().get_state()
        if self.job_id:
            state["job_id"] = self.job_id
        return state

    def clear_state(self) -> None:
        super().clear_state()
        self.job_id = ""
        self.job_info = {}

    def gpuq_job_name(self) -> str:
        """job_name for the user; a named server's name added, so servers never share one."""
        base = self.job_name.format(username=self.user.name)
        return f"{base}-{self.name}" if self.name else base

    def submit_args(self, options: JobOptions) -> list[str]:
        args = ["submit", "--parsable", "-J", self.gpuq_job_name(),
                f"--time={options.time}", "-o", self.output, "-D", self.home()]
        if options.gpus:
            args.append(f"--gres=gpu:{options.gpus}")
        return args

    def script(self, options: JobOptions) -> str:
        base_url = self.server.base_url if self.server else "/"
        container = (container_lines(self.runtimes()[0], options.image, self.home())
                     if options.image else ([], ""))
        return job_script(sys.executable, self.ip or "127.0.0.1", base_url,
                          list(self.cmd) + list(self.get_args()), container)

    async def start(self) -> tuple[str, int]:
        self.starting = True
        try:
            options = self.checked_options(self.user_options or {})
            await self.cancel_leftovers()
            out = await self.gpuq_call(*self.submit_args(options), stdin=self.script(options),
                                       env=self.client_env())
            self.job_id = out.strip().split(";")[0]
            self.log.info("gpuq job %s submitted for %s", self.job_id, self.user.name)
            self.save_state()
            port = await self.wait_for_port()
            return (self.ip or "127.0.0.1", port)
        finally:
            self.starting = False

    def save_state(self) -> None:
        """The job id in the hub's database at once, not only once start() returns (JupyterHub
        saves state then): a hub restarted while the job waits still knows it (poll)."""
        if self.orm_spawner is None:
            return
        from sqlalchemy import inspect
        session = inspect(self.orm_spawner).session
        if session is not None:
            self.orm_spawner.state = self.get_state()
            session.commit()

    async def cancel_leftovers(self) -> None:
        """Jobs of this server that an earlier hub left (it stopped or crashed while they waited
        or ran, and forgot them): cancelled before a new one is submitted, so that they hold no
        GPU nobody can reach."""
        name = self.gpuq_job_name()
        for job in json.loads(await self.gpuq_call("queue", "--me", "--json")):
            if job.get("name") == name and job.get("state") in ACTIVE_STATES:
                self.log.warning("cancelling gpuq job %s, %s's server left by an earlier hub",
                                 job["display_id"], self.user.name)
                await self.gpuq_call("cancel", str(job["display_id"]))

    async def wait_for_port(self) -> int:
        log_error_since: Optional[float] = None
        while True:
            job = await self.show()
            if job is None or job["state"] not in ACTIVE_STATES:
                raise GpuqSpawnerError(self.ended_message(job), 500)
            self.job_info = job
            if job["state"] == "RUNNING":
                try:  # the job's output file appears a moment after it starts RUNNING
                    match = PORT_LINE.search(await self.gpuq_call("log", self.job_id))
                    log_error_since = None
                except GpuqSpawnerError:
                    log_error_since = log_error_since or time.monotonic()
                    if time.monotonic() - log_error_since > LOG_GRACE_SECONDS:
                        raise
                    match = None
                if match:
                    return int(match.group(1))
            await asyncio.sleep(self.status_interval)

    def ended_message(self, job: Optional[dict]) -> str:
        if job is None:
            return f"gpuq job {self.job_id} is gone before Jupyter started"
        why = f": {job['error']}" if job.get("error") else ""
        return (f"gpuq job {self.job_id} ended {job['state']} (exit code {job.get('exit_code', 0)}) "
                f"before Jupyter started{why}; see ~/{self.output.replace('%j', self.job_id)}")

    async def progress(self):
        said = ""
        while True:
            if self.job_info:
                message = pending_message(self.job_info)
                if message != said:
                    said = message
                    yield {"progress": 80 if self.job_info["state"] == "RUNNING" else 30,
                           "message": message}
            await asyncio.sleep(0.5)

    async def poll(self) -> Optional[int]:
        if not self.job_id:
            return 0
        try:
            job = await self.show()
        except GpuqSpawnerError as e:  # the daemon restarting: the job keeps running
            self.log.warning("poll of gpuq job %s: %s", self.job_id, e)
            return None
        if job is not None and job["state"] == "PENDING" and not self.starting:
            # Waiting with no start() to wait for it (the hub restarted, or gpuq requeued the
            # server): nothing will ever connect to it. Cancelled, so it holds no GPU later.
            self.log.warning("cancelling gpuq job %s: pending, and no spawn waits for it",
                             self.job_id)
            try:
                await self.gpuq_call("cancel", self.job_id)
            except GpuqSpawnerError as e:  # it started or ended meanwhile: the next look says
                self.log.warning("cancel of gpuq job %s: %s", self.job_id, e)
                return None
            return 0
        if job is not None and job["state"] in ACTIVE_STATES:
            return None
        return int(job.get("exit_code") or 0) if job else 0

    async def stop(self, now: bool = False) -> None:
        if not self.job_id:
            return
        try:
            await self.gpuq_call("cancel", self.job_id)
        except GpuqSpawnerError as e:
            self.log.warning("cancel of gpuq job %s: %s", self.job_id, e)
        deadline = time.monotonic() + STOP_SECONDS
        while time.monotonic() < deadline:
            if await self.poll() is not None:
                return
            await asyncio.sleep(0.5)
        self.log.warning("gpuq job %s still running 60 s after gpuq cancel", self.job_id)
