"""Tests of gpuq_spawner: its pure parts (option checking, the job script, the pending message)
and, against a real gpuq daemon (GPUQ_BIN), what keeps a GPU from being held by a server nobody
can reach (a daemon restart, a hub restart, a hung daemon).
    python3 -m unittest tests/queue/gpuq_spawner_test.py
        (PYTHONPATH=launcher/queue/jupyterhub, GPUQ_BIN=build/launcher/queue/gpuq)
"""
import asyncio
import json
import os
import pwd
import signal
import subprocess
import tempfile
import time
import unittest

from gpuq_spawner import (GpuqSpawner, GpuqSpawnerError, JobOptions, container_lines, job_script,
                          parse_options, pending_message, time_limit_seconds)


def parse(**raw):
    return parse_options(raw, max_gpus=4, default_time="8:00:00", max_seconds=24 * 3600,
                         runtimes=[])


class Options(unittest.TestCase):
    def test_good_options_from_the_form_and_the_api(self):
        self.assertEqual(parse(gpus=["2"], time=["1:30:00"]), JobOptions(2, "1:30:00"))
        self.assertEqual(parse(gpus=1, time="90"), JobOptions(1, "90"))
        self.assertEqual(parse(), JobOptions(0, "8:00:00"))
        self.assertEqual(parse(gpus=["1"], _xsrf=["token"]), JobOptions(1, "8:00:00"))

    def test_bad_options_name_the_field_and_the_value(self):
        for raw, words in [({"gpus": "-1"}, ["GPUs", "'-1'", "0 to 4"]),
                           ({"gpus": "abc"}, ["GPUs", "'abc'"]),
                           ({"gpus": "5"}, ["GPUs", "'5'"]),
                           ({"time": "forever"}, ["time limit", "'forever'", "H:MM:SS"]),
                           ({"time": "0"}, ["time limit", "'0'"]),
                           ({"time": "2-00:00:00"}, ["time limit", "24 hours"]),
                           ({"image": "x"}, ["no podman or apptainer"]),
                           ({"colour": "red"}, ["unknown option", "colour"])]:
            with self.assertRaises(GpuqSpawnerError) as e:
                parse(**raw)
            for w in words:
                self.assertIn(w, str(e.exception), raw)

    def test_an_image_needs_a_runtime_and_a_plain_name(self):
        ok = parse_options({"image": "docker://ubuntu:22.04"}, 4, "1", 3600, ["podman"])
        self.assertEqual(ok.image, "docker://ubuntu:22.04")
        with self.assertRaises(GpuqSpawnerError):
            parse_options({"image": "x; rm -rf ~"}, 4, "1", 3600, ["podman"])

    def test_time_forms_are_gpuqs(self):
        self.assertEqual(time_limit_seconds("90"), 5400)
        self.assertEqual(time_limit_seconds("1-02:03:04"), 93784)
        self.assertIsNone(time_limit_seconds("1h"))


class Script(unittest.TestCase):
    def test_the_script_says_its_port_and_execs_the_server_on_it(self):
        script = job_script("python3", "127.0.0.1", "/user/a b/", ["sh", "-c", 'echo "$JUPYTERHUB_SERVICE_URL"'])
        out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout
        first, second = out.splitlines()
        port = first.removeprefix("gpuq-spawner: port ")
        self.assertTrue(port.isdigit(), first)
        self.assertEqual(second, f"http://127.0.0.1:{port}/user/a b/")

    def test_podman_sees_only_the_jobs_gpus_numbered_from_0(self):
        setup, prefix = container_lines("podman", "img", "/home/a")
        script = job_script("python3", "127.0.0.1", "/", ["jupyterhub-singleuser"], (setup, prefix))
        script = script.replace("exec podman", "exec echo podman")
        out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True,
                             env={"CUDA_VISIBLE_DEVICES": "3,5", "PATH": "/usr/bin:/bin"}).stdout
        line = out.splitlines()[1]
        self.assertIn("--device=nvidia.com/gpu=3 --device=nvidia.com/gpu=5", line)
        self.assertIn("--env=CUDA_VISIBLE_DEVICES=0,1", line)
        self.assertTrue(line.endswith("img jupyterhub-singleuser"), line)


class Pending(unittest.TestCase):
    def test_position_reason_and_start(self):
        start = int(time.time() * 1000) + 60_000
        msg = pending_message({"state": "PENDING", "reason": "Resources", "position": 2,
                               "expected_start_ms": start, "gpus_requested": 1})
        self.assertRegex(msg, r"^waiting for a GPU: position 2 \(Resources\), expected start \d\d:\d\d$")

    def test_no_estimate_and_a_spent_budget(self):
        msg = pending_message({"state": "PENDING", "reason": "Resources", "position": 1,
                               "expected_start_ms": 0, "gpus_requested": 1})
        self.assertTrue(msg.endswith("expected start unknown"), msg)
        msg = pending_message({"state": "PENDING", "reason": "AssocGrpGRESMinutes"})
        self.assertIn("GPU-hour budget is spent", msg)


class HubUser:
    name = pwd.getpwuid(os.getuid()).pw_name


@unittest.skipUnless(os.environ.get("GPUQ_BIN"), "GPUQ_BIN names no gpuq to run a daemon")
class WithADaemon(unittest.IsolatedAsyncioTestCase):
    """A gpuq daemon of one GPU id; the spawner runs the client as this user (run_as empty)."""

    def setUp(self):
        self.gpuq = os.environ["GPUQ_BIN"]
        self.dir = tempfile.mkdtemp(prefix="gpuq-spawner-test-")
        self.sock = f"{self.dir}/gpuq.sock"
        self.daemon = None
        self.start_daemon()
        self.spawner = GpuqSpawner(user=HubUser(), run_as=[], socket=self.sock, gpuq=self.gpuq,
                                   daemon_grace=20, call_timeout=10)

    def tearDown(self):
        for job in json.loads(self.cli("queue", "--json")):
            self.cli("cancel", str(job["display_id"]))
        self.daemon.terminate()
        self.daemon.wait()
        self.daemon_log.close()
        subprocess.run(["rm", "-rf", self.dir], check=False)

    def start_daemon(self):
        if self.daemon is not None:
            self.daemon_log.close()
        self.daemon_log = open(f"{self.dir}/daemon.log", "a")
        self.daemon = subprocess.Popen(
            [self.gpuq, "daemon", "--gpus", "0", "--state-dir", f"{self.dir}/state", "--socket",
             self.sock, "--sample-interval", "0", "--kill-wait", "1"],
            stderr=self.daemon_log)
        for _ in range(200):
            if subprocess.run([self.gpuq, "queue", "--socket", self.sock],
                              capture_output=True).returncode == 0:
                return
            time.sleep(0.05)
        raise RuntimeError("the gpuq daemon did not answer")

    def cli(self, *args, stdin=""):
        return subprocess.run([self.gpuq, *args, "--socket", self.sock], input=stdin, text=True,
                              capture_output=True, check=True, cwd=self.dir).stdout

    def submit(self, name, body):
        out = self.cli("submit", "--parsable", "-J", name, "--gres=gpu:1", "-o",
                       f"{self.dir}/%j.out", stdin=f"#!/bin/sh\n{body}\n")
        return out.strip().split(";")[0]

    def state(self, job):
        return json.loads(self.cli("show", "--json", job))[0]["state"]

    def final_state(self, job):
        """The state once the job has ended: a cancelled running job ends after SIGTERM."""
        for _ in range(400):
            state = self.state(job)
            if state not in ("PENDING", "RUNNING"):
                return state
            time.sleep(0.05)
        return state

    async def test_a_pending_job_no_spawn_waits_for_is_cancelled_by_poll(self):
        # A hub restarted while the server waited in the queue: nothing will connect to it.
        self.submit("holder", "sleep 60")
        self.spawner.job_id = self.submit(self.spawner.gpuq_job_name(), "sleep 60")
        self.assertEqual(await self.spawner.poll(), 0)
        self.assertEqual(self.final_state(self.spawner.job_id), "CANCELLED")

    async def test_start_cancels_what_an_earlier_hub_left(self):
        left = self.submit(self.spawner.gpuq_job_name(), "sleep 60")
        other = self.submit("not-jupyter", "sleep 60")
        await self.spawner.cancel_leftovers()
        self.assertEqual(self.final_state(left), "CANCELLED")
        self.assertIn(self.state(other), ("PENDING", "RUNNING"))  # not cancelled

    async def test_a_daemon_restart_while_starting_is_waited_out(self):
        self.spawner.job_id = self.submit(self.spawner.gpuq_job_name(),
                                          'echo "gpuq-spawner: port 4321"; sleep 60')
        self.daemon.send_signal(signal.SIGTERM)  # the job goes on; the next daemon adopts it
        self.daemon.wait()
        waiting = asyncio.ensure_future(self.spawner.wait_for_port())
        await asyncio.sleep(2)
        self.assertFalse(waiting.done(), "gave up while the daemon was down")
        self.start_daemon()
        self.assertEqual(await asyncio.wait_for(waiting, 30), 4321)

    async def test_a_hung_daemon_does_not_hang_the_hub(self):
        hung = f"{self.dir}/hung-gpuq"
        with open(hung, "w") as f:
            f.write("#!/bin/sh\nexec sleep 60\n")
        os.chmod(hung, 0o755)
        self.spawner.gpuq, self.spawner.daemon_grace, self.spawner.call_timeout = hung, 1, 1
        t0 = time.monotonic()
        with self.assertRaises(GpuqSpawnerError) as e:
            await self.spawner.gpuq_call("queue")
        self.assertIn("did not answer within 2 s", str(e.exception))
        self.assertLess(time.monotonic() - t0, 10)

    async def test_the_umask_reaches_the_job(self):
        # The job takes the client's umask: the hub's own unless umask says (a lab's 077).
        self.spawner.umask = "077"
        out = await self.spawner.gpuq_call("submit", "--parsable", "-o", f"{self.dir}/%j.out",
                                           stdin="#!/bin/sh\numask\n")
        job = out.strip().split(";")[0]
        self.final_state(job)
        with open(f"{self.dir}/{job}.out") as f:
            self.assertEqual(f.read().strip(), "0077")
        self.spawner.umask = "rw-"
        with self.assertRaises(GpuqSpawnerError):
            await self.spawner.gpuq_call("queue")

    async def test_a_default_time_past_max_hours_is_the_admins_error(self):
        self.spawner.max_hours = 4  # the default time limit stays 8:00:00
        with self.assertRaises(GpuqSpawnerError) as e:
            self.spawner.checked_options({})
        self.assertIn("GpuqSpawner.default_time '8:00:00'", str(e.exception))
        self.assertIn("max_hours (4 hours)", str(e.exception))


if __name__ == "__main__":
    unittest.main()
