#!/usr/bin/env python3
"""Seeds fuzz/corpus/<target>/ from the conformance vectors, so the fuzzers start from inputs
that reach deep into each grammar. Run from anywhere: python3 fuzz/seed_corpus.py"""

import hashlib
import json
import pathlib

FUZZ = pathlib.Path(__file__).resolve().parent
ROOT = FUZZ.parent


def vectors(path):
    for line in (ROOT / path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            yield json.loads(line)


def write(target, text):
    data = text.encode("utf-8")
    out = FUZZ / "corpus" / target
    out.mkdir(parents=True, exist_ok=True)
    (out / hashlib.sha1(data).hexdigest()).write_bytes(data)


for case in vectors("crates/postbuild-subst/testdata/envsubst-upstream.jsonl"):
    if case.get("layer") in ("envsubst", "cli"):
        write("envsubst", case["input"])
for case in vectors("crates/postbuild-subst/testdata/yaml-v2.jsonl"):
    if case.get("layer") == "y2j":
        write("yaml_parse", case["input"])
    elif case.get("layer") == "j2y":
        write("yaml_emit", case["input"])
for case in vectors("crates/watch-index/testdata/label-selectors.jsonl"):
    if isinstance(case.get("input"), str):
        write("selector", case["input"])
    elif case.get("input") is not None:
        write("selector", json.dumps(case["input"]))
for seed in ["flux-system/ghcr-auth\0team-*, ci\0team-a", "a/b/c\0*\0", "/\0?\0x", "a/\0,,\0a"]:
    write("copy_consent", seed)
for seed in [
    "reloader.stakater.com/auto=true",
    "configmap.reloader.stakater.com/reload=app-.*,other\nsecret.reloader.stakater.com/reload=(a",
    "reloader.stakater.com/search=true\nreloader.stakater.com/match=true",
    "wave.pusher.com/update-on-config-change=true\nconfigmaps.exclude.reloader.stakater.com/reload=a",
]:
    write("reloader_opt_in", seed)
for target in sorted((FUZZ / "corpus").iterdir()):
    print(f"{target.name}: {len(list(target.iterdir()))} seeds")
