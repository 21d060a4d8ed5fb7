// validate.cjs FILE...: validates every document of the Kubernetes manifests
// against the API's OpenAPI schema (as bundled by kubernetes-models: types,
// required fields, enums, formats), offline. Unknown kinds fail: a manifest
// this cannot check is a manifest nobody checked.
"use strict";
const fs = require("fs");
const YAML = require("yaml");

const groups = {
  v1: "kubernetes-models/v1",
  "apps/v1": "kubernetes-models/apps/v1",
  "policy/v1": "kubernetes-models/policy/v1",
};
let failed = 0;
for (const file of process.argv.slice(2)) {
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, "utf8"));
  docs.forEach((doc, i) => {
    const where = `${file} document ${i + 1}`;
    if (doc.errors.length) {
      console.error(`${where}: ${doc.errors.map(String).join("; ")}`);
      failed++;
      return;
    }
    const obj = doc.toJS();
    if (!obj) return;
    const mod = groups[obj.apiVersion];
    const Model = mod && require(mod)[obj.kind];
    if (!Model) {
      console.error(`${where}: no schema for ${obj.apiVersion} ${obj.kind}`);
      failed++;
      return;
    }
    try {
      new Model(obj).validate();
      console.log(`${where}: ${obj.kind} ${obj.metadata && obj.metadata.name}: valid`);
    } catch (e) {
      console.error(`${where}: ${obj.kind}: ${e.message}`);
      failed++;
    }
  });
}
process.exit(failed ? 1 : 0);
