"""Translate the SAM template to plain CloudFormation with aws-sam-translator, offline.

Why this exists: cfn-lint on the SAM source misses errors that only show in the generated resources
(an event source mapping's ScalingConfig, the IAM statements a policy template expands to), and moto's
CloudFormation ignores the SAM transform. Both need the translation CloudFormation itself would run.

The translator refuses local paths, so local ``CodeUri``/``ContentUri`` values are rewritten to
``s3://`` locations first, as ``sam package`` does. The command line uses placeholder locations (the
translation is for linting); ``tests/aws/stack.py`` passes a function that zips and uploads each
directory to a moto bucket.

Usage: ``python -m tests.tools.translate template.yaml build/template.translated.json``
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import boto3
import yaml
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator
from samtranslator.yaml_helper import intrinsics_multi_constructor

DEFAULT_REGION = "us-east-1"
PLACEHOLDER_BUCKET = "harvester-package-placeholder"

# (SAM resource type, property holding a local path) pairs that `sam package` uploads.
PACKAGEABLE = {
    "AWS::Serverless::Function": "CodeUri",
    "AWS::Serverless::LayerVersion": "ContentUri",
}

#: ``uploader(logical_id, resource_type, local_dir) -> "s3://bucket/key"``.
Uploader = Callable[[str, str, Path], str]


# libyaml's loader when PyYAML has it: the pure-Python one takes ~0.3 s per read of template.yaml.
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _CfnLoader(_SafeLoader):  # type: ignore[valid-type,misc]
    """A safe loader that reads CloudFormation short-form intrinsics (``!Ref``, ``!GetAtt``...).

    A subclass, so that registering the tags does not change ``yaml.safe_load`` for the whole process
    (``samtranslator.yaml_helper.yaml_parse`` registers them on ``yaml.SafeLoader`` itself).
    """


_CfnLoader.add_multi_constructor("!", intrinsics_multi_constructor)


def load_template(path: str | Path) -> dict[str, Any]:
    """Read a SAM/CloudFormation template (YAML or JSON) with intrinsics in their long form."""
    text = Path(path).read_text(encoding="utf-8")
    loaded = yaml.load(text, Loader=_CfnLoader)
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: not a template (top level is {type(loaded).__name__})")
    return loaded


def is_local_path(value: Any) -> bool:
    """True for a string that `sam package` would upload (not already an s3:// URI or an intrinsic)."""
    return isinstance(value, str) and not value.startswith("s3://")


def placeholder_uploader(bucket: str = PLACEHOLDER_BUCKET) -> Uploader:
    """An uploader that uploads nothing: stable s3:// locations, enough to translate and lint."""

    def upload(logical_id: str, resource_type: str, local_dir: Path) -> str:
        return f"s3://{bucket}/{logical_id}.zip"

    return upload


def package_local_uris(template: Mapping[str, Any], base_dir: Path, uploader: Uploader) -> dict[str, Any]:
    """Return a copy of ``template`` whose local CodeUri/ContentUri point at what ``uploader`` returns.

    Paths are relative to ``base_dir`` (the template's directory), as SAM resolves them. A CodeUri set
    in ``Globals.Function`` is applied to each function that does not set its own, so that each
    function still gets its own upload (as ``sam package`` does after merging globals).
    """
    packaged = copy.deepcopy(dict(template))
    global_code_uri = packaged.get("Globals", {}).get("Function", {}).pop("CodeUri", None)
    for logical_id, resource in packaged.get("Resources", {}).items():
        if not isinstance(resource, dict):
            continue
        key = PACKAGEABLE.get(resource.get("Type", ""))
        if key is None:
            continue
        properties = resource.setdefault("Properties", {})
        if resource["Type"] == "AWS::Serverless::Function":
            if properties.get("PackageType", "Zip") != "Zip" or "InlineCode" in properties:
                continue
            properties.setdefault(key, global_code_uri)
        value = properties.get(key)
        if is_local_path(value):
            properties[key] = uploader(logical_id, resource["Type"], (base_dir / value).resolve())
    return packaged


def local_code_dirs(template: Mapping[str, Any], base_dir: Path) -> dict[str, Path]:
    """Map each function and layer logical id to its local code directory (resolved, absolute)."""
    global_code_uri = template.get("Globals", {}).get("Function", {}).get("CodeUri")
    found: dict[str, Path] = {}
    for logical_id, resource in template.get("Resources", {}).items():
        if not isinstance(resource, dict):
            continue
        key = PACKAGEABLE.get(resource.get("Type", ""))
        if key is None:
            continue
        value = resource.get("Properties", {}).get(key, global_code_uri)
        if is_local_path(value):
            found[logical_id] = (base_dir / value).resolve()
    return found


def translate(
    template: Mapping[str, Any],
    parameter_values: Mapping[str, Any] | None = None,
    region: str = DEFAULT_REGION,
) -> dict[str, Any]:
    """Run the SAM transform on an already packaged template (no local paths left).

    No credentials are needed: the session only supplies the region (for ARNs built at translation
    time), and the managed-policy map is empty because the template names managed policies by ARN
    only (policy templates and SAM's own execution-role ARNs).
    """
    translator = Translator(
        managed_policy_map=None,
        sam_parser=Parser(),
        boto_session=boto3.Session(region_name=region),
    )
    translated = translator.translate(
        copy.deepcopy(dict(template)),
        parameter_values=dict(parameter_values or {}),
        get_managed_policy_map=dict,
    )
    # A no-op publisher; publishing keeps the translator from warning about "unpublished metrics".
    translator.metrics.publish()
    return translated


def translate_file(
    template_path: str | Path,
    *,
    uploader: Uploader | None = None,
    parameter_values: Mapping[str, Any] | None = None,
    region: str = DEFAULT_REGION,
) -> dict[str, Any]:
    """Load, package (placeholder locations unless an uploader is given) and translate a template."""
    path = Path(template_path)
    source = load_template(path)
    packaged = package_local_uris(source, path.resolve().parent, uploader or placeholder_uploader())
    return translate(packaged, parameter_values, region)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: write the translation as JSON; exit 1 with the translator's messages on error."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("template", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--region", default=DEFAULT_REGION)
    args = parser.parse_args(argv)
    try:
        translated = translate_file(args.template, region=args.region)
    except Exception as error:  # the translator raises InvalidDocumentException with a list of causes
        causes = getattr(error, "causes", None) or [error]
        for cause in causes:
            print(f"{args.template}: {getattr(cause, 'message', cause)}", file=sys.stderr)
        return 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(translated, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    print(f"{args.template} -> {args.output} ({len(translated.get('Resources', {}))} resources)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
