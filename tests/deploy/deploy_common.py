"""What the deployment tests share: running a command, and deploy/systemd as
systemd reads it (check_systemd_unit.sh, walk_systemd.py: the example
environment file and the unit's ExecStart, expanded as systemd expands
them)."""
import re
import shlex
import subprocess
import sys


def run(cmd, **kw):
    """`cmd`'s stdout; exits naming the command and its output when it fails."""
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout


def example_env(path):
    """An EnvironmentFile's values (deploy/systemd/worker.env): KEY=VALUE
    lines, a quoted value one word; blank lines and # comments skipped."""
    env = {}
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, value = line.split("=", 1)
        env[key] = shlex.split(value)[0] if value else ""
    return env


def exec_start(unit_path, values, worker, state_dir, instance="0"):
    """The unit's ExecStart for `instance` as systemd runs it: %i the
    instance, ${VAR} one word (even empty), $VAR split at spaces; the binary
    is `worker` and /var/lib/reckon is `state_dir`."""
    line = next(l for l in open(unit_path) if l.startswith("ExecStart="))[len("ExecStart="):]
    words = []
    for word in line.replace("%i", instance).split():
        whole, split = re.fullmatch(r"\$\{(\w+)\}", word), re.fullmatch(r"\$(\w+)", word)
        if whole:
            words.append(values.get(whole.group(1), ""))
        elif split:
            words.extend(shlex.split(values.get(split.group(1), "")))
        else:
            words.append(word.replace("/var/lib/reckon", state_dir))
    words[0] = worker
    return words


if __name__ == "__main__":
    # deploy_common.py UNIT ENV_FILE WORKER STATE_DIR [KEY=VALUE ...]: the
    # command line, NUL-separated, with the overrides given.
    unit, env_file, worker, state = sys.argv[1:5]
    values = example_env(env_file)
    values.update(kv.split("=", 1) for kv in sys.argv[5:])
    print("\0".join(exec_start(unit, values, worker, state)), end="")
