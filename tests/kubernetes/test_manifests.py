"""deploy/kubernetes's manifests: valid against Kubernetes' own schemas (kubernetes-validate,
strict: an unknown field fails), and consistent with objtier and with each other. No cluster
runs on these machines, so nothing here starts a pod.

    tests/kubernetes/run      (the venv with kubernetes-validate comes from scripts/install-deps)
"""
import os
import re
import shutil
import subprocess
import unittest

import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DEPLOY = os.path.join(ROOT, "deploy", "kubernetes")
OBJTIER = os.environ.get("OBJTIER", os.path.join(ROOT, "target", "release", "objtier"))


def load(name):
    with open(os.path.join(DEPLOY, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def daemonset():
    return next(d for d in load("objtier.yaml") if d["kind"] == "DaemonSet")


def option(args, name):
    return args[args.index(name) + 1]


class Manifests(unittest.TestCase):
    def test_valid_against_the_kubernetes_schemas(self):
        validate = shutil.which("kubernetes-validate")
        self.assertIsNotNone(validate, "kubernetes-validate is missing: run scripts/install-deps")
        out = subprocess.run(
            [validate, "--strict", "objtier.yaml", "example-pod.yaml"],
            cwd=DEPLOY, capture_output=True, text=True,
        )
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertEqual(out.stdout.count("passed"), 3, out.stdout)

    def test_the_daemon_shares_its_socket_and_library_where_pods_look(self):
        spec = daemonset()["spec"]["template"]["spec"]
        self.assertTrue(spec["hostPID"], "SO_PEERCRED pids must be the node's")
        volumes = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
        daemon = spec["containers"][0]
        mounts = {m["mountPath"]: volumes[m["name"]] for m in daemon["volumeMounts"]}
        socket = option(daemon["command"], "--socket")
        self.assertEqual(mounts[os.path.dirname(socket)], "/run/objtier")
        probe = daemon["readinessProbe"]["exec"]["command"]
        self.assertEqual(probe[1:], ["status", "--socket", socket])
        self.assertIn("limits", daemon["resources"])
        init = spec["initContainers"][0]
        copied_to = os.path.dirname(init["command"][-1])
        lib_dir = {m["mountPath"]: volumes[m["name"]] for m in init["volumeMounts"]}[copied_to]
        pod = load("example-pod.yaml")[0]["spec"]
        pod_volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
        app = pod["containers"][0]
        env = {e["name"]: e["value"] for e in app["env"]}
        pod_mounts = {m["mountPath"]: pod_volumes[m["name"]] for m in app["volumeMounts"]}
        preload = env["LD_PRELOAD"]
        self.assertEqual(pod_mounts[os.path.dirname(preload)], lib_dir)
        self.assertEqual(os.path.basename(preload), os.path.basename(init["command"][-1]))
        self.assertEqual(pod_mounts[os.path.dirname(env["OBJTIER_SOCKET"])], "/run/objtier")
        self.assertEqual(os.path.basename(env["OBJTIER_SOCKET"]), os.path.basename(socket))

    def test_the_same_capabilities_as_the_service(self):
        with open(os.path.join(ROOT, "packaging", "objtier.service")) as f:
            bounding = re.search(r"^CapabilityBoundingSet=(.*)$", f.read(), re.M).group(1).split()
        caps = daemonset()["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]
        self.assertEqual(caps["drop"], ["ALL"])
        self.assertEqual(sorted("CAP_" + c for c in caps["add"]), sorted(bounding))

    def test_the_daemon_command_line_is_objtier_s(self):
        """Every option the DaemonSet gives is one `objtier daemon` takes (its --help)."""
        if not os.access(OBJTIER, os.X_OK):
            self.skipTest(f"{OBJTIER} is not built (cargo build --release)")
        help_text = subprocess.run([OBJTIER, "daemon", "--help"], capture_output=True, text=True).stdout
        command = daemonset()["spec"]["template"]["spec"]["containers"][0]["command"]
        self.assertEqual(command[:2], ["/usr/bin/objtier", "daemon"])
        for arg in command[2:]:
            if arg.startswith("--"):
                self.assertIn(f"  {arg} ", help_text, f"{arg} is not an objtier daemon option")
        self.assertIn(option(command, "--log-format"), ("auto", "text", "json", "journald"))


if __name__ == "__main__":
    unittest.main()
