#!/usr/bin/env bash
# promtool's checks of everything in dashboards/ that it can read: the
# Prometheus configurations, the alert rules and their unit tests, and the
# Grafana dashboard as JSON. Debian's promtool is built without Kubernetes
# service discovery, so the Kubernetes configuration is checked with its
# kubernetes_sd_configs swapped for an empty static list: every other field,
# relabelling included, goes through promtool. Usage: check_dashboards.sh DIR
set -euo pipefail
dir=$1
command -v promtool > /dev/null || { echo "promtool is missing: ./deploy/install-deps.sh installs Debian's prometheus"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cp "$dir/alerts.yml" "$dir/alerts_test.yml" "$dir/prometheus.yml" "$work/"
mkdir -p "$work/targets"
echo '[{"targets": ["127.0.0.1:9464"]}]' > "$work/targets/local.json"
promtool check config "$work/prometheus.yml"
promtool check rules "$work/alerts.yml"
(cd "$work" && promtool test rules alerts_test.yml)

grep -q 'kubernetes_sd_configs:' "$dir/prometheus-kubernetes.yml"
python3 - "$dir/prometheus-kubernetes.yml" "$work/prometheus-kubernetes.yml" <<'PY'
import sys, yaml
config = yaml.safe_load(open(sys.argv[1]))
for job in config["scrape_configs"]:
    assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}], job["job_name"]
    job["static_configs"] = [{"targets": []}]
yaml.safe_dump(config, open(sys.argv[2], "w"))
PY
promtool check config "$work/prometheus-kubernetes.yml"

python3 - "$dir/reckon.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
names = [v["name"] for v in d["templating"]["list"]]
assert names == ["datasource", "node"], names
ids = [p["id"] for p in d["panels"]]
assert len(ids) == len(set(ids)), "duplicate panel ids"
for p in d["panels"]:
    assert p["datasource"]["uid"] == "${datasource}", p["title"]
    assert p["targets"], p["title"]
    for t in p["targets"]:
        assert "reckon_" in t["expr"] or "up{" in t["expr"], (p["title"], t["expr"])
print(f"{sys.argv[1]}: {len(ids)} panels, datasource and node variables")
PY
echo "dashboards: all checks passed"
