"""Unit tests of gpuq_spawner's pure parts: option checking, the job script, the pending message.
    python3 -m unittest tests/queue/gpuq_spawner_test.py   (PYTHONPATH=launcher/queue/jupyterhub)
"""
import subprocess
import time
import unittest

from gpuq_spawner import (GpuqSpawnerError, JobOptions, container_lines, job_script,
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


if __name__ == "__main__":
    unittest.main()
