"""``kip models``: the model registry, and who signed what is in it.

    kip models build-reference [--sign]   export MiniLM and the digits classifier
    kip models list                       aliases, versions, who signed each
    kip models sign minilm                sign the version an alias points to (or NAME@VERSION)
    kip models verify [minilm]            re-hash every file and check the signatures
    kip models import model.onnx --manifest fields.json [--file tokenizer.json] [--alias A]
    kip models export mypkg.models:classifier [--atol 1e-4] [--alias A]
    kip models push [minilm ...]          copy versions to the model store (KIP_MODEL_STORE)
    kip models pull NAME@VERSION ...      stage versions from the store, checked, into the registry
    kip models list --store               the versions the store holds

Signing uses ``KIP_MODEL_SIGNING_KEY_FILE``: a release engineer's key, kept off the
servers, which hold only the public keys (``KIP_MODEL_PUBLIC_KEYS_FILE``).
"""

from __future__ import annotations

import getpass
import sys
from pathlib import Path


def add_command(sub) -> None:
    models = sub.add_parser("models", help="the model registry and store: build, list, push, pull, sign, verify")
    actions = models.add_subparsers(required=True, metavar="ACTION")
    build = actions.add_parser("build-reference", help="export the reference models")
    build.add_argument("--force", action="store_true", help="rebuild even if present")
    build.add_argument("--fp16", action="store_true", help="also MiniLM in fp16 for GPUs "
                       "(minilm-fp16), checked against torch")
    build.add_argument("--sign", action="store_true", help="and sign them "
                       "(KIP_MODEL_SIGNING_KEY_FILE)")
    build.set_defaults(func=_build)
    listing = actions.add_parser("list", help="aliases, versions and their signers")
    listing.add_argument("--store", action="store_true", help="the model store's versions "
                         "(KIP_MODEL_STORE) instead")
    listing.set_defaults(func=_list)
    _add_store_commands(actions)
    sign = actions.add_parser("sign", help="sign a version's manifest")
    sign.add_argument("target", help="an alias or NAME@VERSION")
    sign.set_defaults(func=_sign)
    verify = actions.add_parser("verify", help="re-hash files and check signatures; "
                                "exit 1 if any version does not verify")
    verify.add_argument("targets", nargs="*", help="aliases or NAME@VERSION (default: all)")
    verify.set_defaults(func=_verify)
    imported = actions.add_parser("import", help="an ONNX file with its manifest fields")
    imported.add_argument("onnx", type=Path)
    imported.add_argument("--manifest", type=Path, required=True, help="JSON: the manifest's "
                          "fields (name, inputs, outputs, max_batch, memory_estimate_bytes, ...)")
    imported.add_argument("--file", type=Path, action="append", default=[],
                          help="an extra file the preprocessing needs (repeatable)")
    exported = actions.add_parser("export", help="a torch module, exported and checked "
                                  "against torch")
    exported.add_argument("factory", help="package.module:function returning (module, "
                          "example inputs, manifest fields)")
    exported.add_argument("--atol", type=float, default=1e-4)
    for action, func in ((imported, _import), (exported, _export)):
        action.add_argument("--alias", help="point this alias at the new version")
        action.add_argument("--sign", action="store_true", help="sign it "
                            "(KIP_MODEL_SIGNING_KEY_FILE)")
        action.set_defaults(func=func)


def _add_store_commands(actions) -> None:
    push = actions.add_parser("push", help="copy versions to the model store")
    push.add_argument("targets", nargs="*", help="aliases or NAME@VERSION (default: every "
                      "aliased version)")
    push.set_defaults(func=_push)
    pull = actions.add_parser("pull", help="stage versions from the model store into the "
                              "registry, every file and signature checked first")
    pull.add_argument("targets", nargs="+", help="NAME@VERSION")
    pull.set_defaults(func=_pull)


def _registry():
    from kip.models.registry import Registry
    from kip.runtime.settings import KipSettings

    settings = KipSettings()
    return settings, Registry(settings.registry_dir)


def _build(args) -> int:
    from kip.models.export.reference import build_reference

    settings, registry = _registry()
    build_reference(registry, force=args.force, fp16=args.fp16)
    if args.sign:
        for alias in ["minilm", "digits"] + (["minilm-fp16"] if args.fp16 else []):
            args.target = alias
            _sign(args)
    return 0


def _store(settings):
    from kip.models.store import ModelStore

    if not settings.model_store:
        raise SystemExit("no model store: set KIP_MODEL_STORE (file://, s3://, gs://, https://)")
    return ModelStore(settings.model_store)


def _push(args) -> int:
    settings, registry = _registry()
    store = _store(settings)
    for target in args.targets or sorted(registry.aliases()):
        mv = registry.resolve(target)
        pushed = store.push(mv)
        print(f"{'pushed ' if pushed else 'present'} {mv.manifest.name}@{mv.manifest.version}")
    return 0


def _pull(args) -> int:
    from kip.models.signing import configured_trust

    settings, registry = _registry()
    store, trust = _store(settings), configured_trust(settings)
    for target in args.targets:
        name, _, version = target.partition("@")
        if not version:
            raise SystemExit(f"pull takes NAME@VERSION, as `kip models list --store` "
                             f"prints them, not '{target}'")
        mv = store.stage(name, version, registry, trust)
        print(f"staged  {name}@{version} in {mv.path}")
    return 0


def _list(args) -> int:
    from kip.models.signing import signatures

    settings, registry = _registry()
    if args.store:
        print("\n".join(_store(settings).versions()))
        return 0
    for alias, target in sorted(registry.aliases().items()):
        mv = registry.resolve(alias)
        signers = ", ".join(f"{s.key_id} ({s.signed_by})" for s in signatures(mv.path))
        print(f"{alias:14} -> {target}  signed by: {signers or 'nobody'}")
    return 0


def _sign(args) -> int:
    from kip.models.signing import sign
    from kip.runtime import keys
    from kip.schemas.codec import now_ms

    settings, registry = _registry()
    mv = registry.resolve(args.target)
    key = keys.model_signing_key(settings.model_signing_key_file)
    path = sign(mv.path, mv.manifest, key, getpass.getuser(), now_ms())
    print(f"signed {mv.manifest.name}@{mv.manifest.version} with key {key.key_id}: {path}")
    return 0


def _import(args) -> int:
    import json

    from kip.models.importing import import_onnx

    settings, registry = _registry()
    fields = json.loads(args.manifest.read_text())
    mv = import_onnx(registry, args.onnx, fields, {f.name: f for f in args.file})
    return _published(args, registry, mv)


def _export(args) -> int:
    from kip.models.importing import export_torch

    settings, registry = _registry()
    return _published(args, registry, export_torch(registry, args.factory, args.atol))


def _published(args, registry, mv) -> int:
    target = f"{mv.manifest.name}@{mv.manifest.version}"
    print(f"published {target} (artifact {mv.manifest.artifact_sha256[:12]})")
    if args.alias:
        registry.set_alias(args.alias, target)
        print(f"{args.alias} -> {target}")
    if args.sign:
        args.target = target
        _sign(args)
    return 0


def _verify(args) -> int:
    from kip.models.signing import verifying_trust
    from kip.schemas.errors import KipError

    settings, registry = _registry()
    try:
        trust = verifying_trust(settings)
    except ValueError as err:
        print(f"no trusted model keys, so no signature can verify: {err}", file=sys.stderr)
        return 1
    targets = args.targets or sorted(set(registry.aliases().values()))
    failed = 0
    for target in targets:
        try:
            mv = registry.resolve(target)
            loaded = registry.load(mv.manifest.name, mv.manifest.version, trust)
        except KipError as err:
            failed += 1
            print(f"{target}: REFUSED {err.code}: {err.message}", file=sys.stderr)
            continue
        signer = loaded.signature.key_id if loaded.signature else "no trusted signature"
        print(f"{target}: ok, files match, signed by {signer}")
    return 1 if failed else 0
