// Validates reckon's rendered Kubernetes manifests (`kubectl kustomize`
// output) offline: every object against its Kubernetes (or Prometheus
// Operator) JSON schema, then what the schemas cannot see: the pieces refer
// to each other correctly. With --pod FILE, writes the worker container's
// args, env and mounts and the ConfigMap's data as JSON, for check_k8s.sh
// to run reckon-worker with them.
// Usage: node validate.mjs RENDERED.yaml [--pod FILE]
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";

const [file, podFlag, podFile] = process.argv.slice(2);
const objects = YAML.parseAllDocuments(fs.readFileSync(file, "utf8"))
  .map((d) => d.toJS())
  .filter((o) => o);
const failures = [];
const fail = (what) => failures.push(what);

async function modelClass(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const module =
    group === "monitoring.coreos.com"
      ? `@kubernetes-models/prometheus-operator/${apiVersion}`
      : `kubernetes-models/${group ? `${group}/` : ""}${version}`;
  try {
    return (await import(module))[kind];
  } catch {
    return undefined;
  }
}

async function validate(o) {
  const Model = await modelClass(o.apiVersion, o.kind);
  if (!Model) return `${o.apiVersion} ${o.kind}: no schema known`;
  try {
    new Model(o).validate();
    return null;
  } catch (e) {
    return `${o.kind}/${o.metadata?.name}: ${e.message}`;
  }
}

// The validator must be able to fail: a StatefulSet with a misspelt field
// and a wrong type is rejected.
const broken = await validate({
  apiVersion: "apps/v1", kind: "StatefulSet", metadata: { name: "x" },
  spec: { replicas: "three", selector: {}, serviceName: "x", template: {}, replicass: 1 },
});
if (!broken) fail("the schema check accepted a broken StatefulSet");

for (const o of objects) {
  const error = await validate(o);
  if (error) fail(error);
}

// The schemas allow fields they do not name; the API server (strict field
// validation) does not. TypeScript's excess-property check on the objects
// as literals of the models' types finds a misspelt field at any depth.
const here = path.dirname(fileURLToPath(import.meta.url));
function typeModule(apiVersion, kind) {
  return apiVersion.startsWith("monitoring.coreos.com/")
    ? `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`
    : `kubernetes-models/${apiVersion.includes("/") ? apiVersion : `v1`}/${kind}`;
}
function unknownFields(list, name) {
  const source = list.map((o, i) =>
    `import type { I${o.kind} as T${i} } from "${typeModule(o.apiVersion, o.kind)}";\n` +
    `export const o${i}: T${i} = ${JSON.stringify(o)};\n`).join("");
  const ts = path.join(here, `${name}.ts`);
  fs.writeFileSync(ts, source);
  try {
    execFileSync(path.join(here, "node_modules/.bin/tsc"),
      ["--noEmit", "--strict", "--skipLibCheck", "--module", "commonjs", "--moduleResolution", "node", ts],
      { encoding: "utf8" });
    return null;
  } catch (e) {
    return (e.stdout || e.message).trim();
  } finally {
    fs.rmSync(ts);
  }
}
const misspelt = unknownFields([{ apiVersion: "apps/v1", kind: "StatefulSet", metadata: { name: "x" },
  spec: { selector: {}, serviceName: "x", template: { spec: { containers: [{ name: "c", imagePullPolicyy: "Always" }] } } } }],
  "misspelt");
if (!misspelt?.includes("imagePullPolicyy")) fail(`the field check accepted a misspelt field: ${misspelt}`);
const unknown = unknownFields(objects, "rendered");
if (unknown) fail(`fields the API would reject:\n${unknown}`);

const find = (kind) => objects.filter((o) => o.kind === kind);
const [sts] = find("StatefulSet");
const matches = (selector, labels) =>
  Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v) &&
  Object.keys(selector ?? {}).length > 0;
if (!sts) {
  fail("no StatefulSet");
} else {
  const podLabels = sts.spec.template.metadata.labels;
  const pod = sts.spec.template.spec;
  const worker = pod.containers.find((c) => c.name === "worker");
  const configMaps = new Map(find("ConfigMap").map((c) => [c.metadata.name, c]));
  const service = find("Service").find((s) => s.metadata.name === sts.spec.serviceName);
  if (!service) fail(`serviceName ${sts.spec.serviceName}: no such Service`);
  else {
    if (service.spec.clusterIP !== "None") fail("the peers Service is not headless");
    if (!service.spec.publishNotReadyAddresses) fail("the peers Service hides not-ready pods");
    if (!matches(service.spec.selector, podLabels)) fail("the Service does not select the pods");
  }
  if (!matches(sts.spec.selector.matchLabels, podLabels)) fail("the StatefulSet's selector");
  for (const pdb of find("PodDisruptionBudget")) {
    if (!matches(pdb.spec.selector.matchLabels, podLabels)) fail("the PDB does not select the pods");
  }
  for (const pm of find("PodMonitor")) {
    if (!matches(pm.spec.selector.matchLabels, podLabels)) fail("the PodMonitor does not select the pods");
    const port = pm.spec.podMetricsEndpoints[0].port;
    if (!worker.ports.some((p) => p.name === port)) fail(`PodMonitor port ${port}: not a container port`);
  }
  for (const np of find("NetworkPolicy")) {
    if (!matches(np.spec.podSelector.matchLabels, podLabels)) fail("the NetworkPolicy does not select the pods");
    const gossip = np.spec.ingress.find((r) => r.ports?.some((p) => p.port === "gossip"));
    if (!gossip || !gossip.from?.length || !gossip.from.every((f) => matches(f.podSelector?.matchLabels, podLabels))) {
      fail("the NetworkPolicy lets others than the workers reach the gossip port");
    }
    for (const rule of np.spec.ingress) {
      for (const p of rule.ports ?? []) {
        if (!worker.ports.some((c) => c.name === p.port)) fail(`NetworkPolicy port ${p.port}: not a container port`);
      }
    }
    if (!np.spec.ingress.some((r) => !r.from && r.ports?.some((p) => p.port === "http"))) {
      fail("the NetworkPolicy keeps Prometheus and the probes from the HTTP port");
    }
  }
  if (find("NetworkPolicy").length === 0) fail("no NetworkPolicy");
  if (find("PodDisruptionBudget").length === 0) fail("no PodDisruptionBudget");
  const referenced = [
    ...pod.volumes.filter((v) => v.configMap).map((v) => v.configMap.name),
    ...worker.env.filter((e) => e.valueFrom?.configMapKeyRef).map((e) => e.valueFrom.configMapKeyRef.name),
  ];
  for (const name of referenced) if (!configMaps.has(name)) fail(`ConfigMap ${name}: not rendered`);
  const training = configMaps.get(referenced[0]);
  if (training && Number(training.data.shards) !== sts.spec.replicas) {
    fail(`shards ${training.data.shards} != replicas ${sts.spec.replicas}: pods would train overlapping or missing shards`);
  }
  for (const probe of [worker.livenessProbe, worker.readinessProbe]) {
    if (!probe || !worker.ports.some((p) => p.name === probe.httpGet.port)) fail("a probe's port is not a container port");
  }
  if (worker.livenessProbe?.httpGet.path !== "/healthz") fail("liveness is not /healthz");
  if (worker.readinessProbe?.httpGet.path !== "/readyz") fail("readiness is not /readyz");
  if (!(pod.terminationGracePeriodSeconds > 10)) fail("terminationGracePeriodSeconds too short");
  if (!worker.lifecycle?.preStop) fail("no preStop");
  if (podFlag === "--pod") {
    fs.writeFileSync(podFile, JSON.stringify({
      name: sts.metadata.name, replicas: sts.spec.replicas, args: worker.args, env: worker.env,
      mounts: worker.volumeMounts, volumes: pod.volumes,
      configMaps: Object.fromEntries([...configMaps].map(([n, c]) => [n, c.data])),
      resources: worker.resources ?? {},
    }, null, 2));
  }
}

if (failures.length > 0) {
  console.error(`${file}:\n  ${failures.join("\n  ")}`);
  process.exit(1);
}
console.log(`${file}: ${objects.length} objects valid (${objects.map((o) => o.kind).join(", ")})`);
