"""Preflight's weights lines: the commit each selected deployment will serve, and whether a kit
image that carries weights (the Neuron image compiles them in; the vllm-cuda image pre-pulls them)
holds the one configured.

A deployment serves (userdata/lib.sh kit_model_revision): the pinned commit (``-c model_revision``,
``-c <id>_model_revision``; kit/config.py); else the commit baked into the image it boots, when
that image holds its model (the AMI's ``kit-model`` and ``kit-model-revision`` tags, written by
the image pipeline's distribution, stacks/images.py ``baked_tags``); else the newest commit at
deploy time, which the instance records. A pin the image does not hold is downloaded at boot (and
on inf2/trn1 compiled there, not loaded): a warning with the command that rebuilds the image.
"""
from __future__ import annotations

from typing import Any, Callable

from kit.weights import REVISION, UNPINNED, short

Add = Callable[[str, str, str, str], None]


def check_weights(add: Add, region: str, targets: list[Any], boots: dict[str, str | None], ec2: Any,
                  short_error: Callable[[BaseException], str], images: "ImageLookup | None" = None) -> None:
    """``targets``: preflight Targets (``weights``: (deployment, repository, commit or None) each);
    ``boots``: backend id -> the AMI its instances boot when it is a kit image that may carry
    weights (its image parameter's value, or ``-c <id>_ami``), None when unknown; ``images``: the
    run's DescribeImages answers (one call per AMI)."""
    images = images or ImageLookup(ec2, short_error)
    for t in targets:
        if not getattr(t, "weights", ()):
            continue
        ami = boots.get(t.id)
        tags: dict[str, str] | None | str = None
        if ami:
            image = images.get(ami)
            tags = ({x["Key"]: x["Value"] for x in image.get("Tags", [])} if isinstance(image, dict)
                    else image.replace("could not read", "could not read the tags of", 1) if isinstance(image, str)
                    else None)
        if isinstance(tags, str):
            add(t.id, "weights", "warn", tags)
            tags = None
        baked_model = (tags or {}).get("kit-model")
        baked = (tags or {}).get("kit-model-revision")
        for name, repo, rev in t.weights:
            holds = baked_model == repo
            if rev:
                add(t.id, "weights", "ok", f"{name}: {repo} at {rev} (pinned)")
                if holds and baked != rev:
                    have = f"at {short(baked)}" if baked and REVISION.match(baked) else \
                        "built unpinned (its commit is on the instance only)" if baked == UNPINNED else "at no recorded commit"
                    add(t.id, "baked weights", "warn",
                        f"{name}: image {ami} holds {repo} {have}, not the pinned {short(rev)}: the boot downloads "
                        f"the pin instead (on inf2/trn1 it also compiles it); fix: python -m harness images build "
                        f"{_image_word(t)} --region {region}")
            elif holds and baked and REVISION.match(baked):
                add(t.id, "weights", "ok", f"{name}: {repo} at {baked}, baked into image {ami} (tag kit-model-revision)")
            else:
                add(t.id, "weights", "ok", f"{name}: {repo}, newest at deploy time (the instance records the commit "
                                           "it gets; pin one with -c model_revision)")


def _image_word(t: Any) -> str:
    from kit import catalog
    from kit.image_facts import FAMILY_IMAGE

    family = catalog.backend(t.id).image or ""
    return "neuron" if family == "neuron" else FAMILY_IMAGE.get(family, family)


class ImageLookup:
    """``DescribeImages`` once per AMI for all of preflight's lines: the image (a dict), None when
    this account cannot see it (``InvalidAMIID.*``, or an empty answer), or the one-line reason the
    call failed otherwise."""

    def __init__(self, ec2: Any, short_error: Callable[[BaseException], str]):
        self.ec2, self.short = ec2, short_error
        self.seen: dict[str, dict | None | str] = {}

    def get(self, ami: str) -> dict | None | str:
        if ami not in self.seen:
            try:
                found = self.ec2.describe_images(ImageIds=[ami]).get("Images", [])
                self.seen[ami] = found[0] if found else None
            except Exception as exc:  # noqa: BLE001 - not found is None, anything else its reason
                code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
                self.seen[ami] = None if code.startswith("InvalidAMIID") else f"could not read {ami}: {self.short(exc)}"
        return self.seen[ami]


def kit_image_of(t: Any) -> str | None:
    """The kit image (kit/image_facts.py) of a target's image family: the one its ``-c <id>_ami``
    would be a copy of, or its image parameter names."""
    from kit import catalog
    from kit.image_facts import FAMILY_IMAGE, neuron_image

    family = catalog.backend(t.id).image or ""
    if family == "neuron":
        return neuron_image(getattr(t, "neuron_sdk", None))
    return FAMILY_IMAGE.get(family)


def built_in(targets: list[Any]) -> dict[str, tuple[str, str | None]]:
    """Kit image -> (model, pinned commit or None) that the image built from this configuration
    holds, by the rule stacks/images.py builds with (plain Python here: preflight loads no
    aws-cdk-lib; tests/harness/test_preflight_weights.py holds the two to the same answers):
    vllm-cuda pre-pulls the model of the first selected backend that boots it, unless that model
    is a package (synced from S3 at boot); the Neuron image downloads and compiles the model of the
    first selected Neuron backend on NEURON_PRECOMPILE_TARGET; vllm-sm75 holds no weights (its
    GPU test serves the model on a test instance, not in the image)."""
    from kit import catalog
    from kit.image_facts import FAMILY_IMAGE, NEURON_PRECOMPILE_TARGET
    from kit.schemes import scheme_of_model

    out: dict[str, tuple[str, str | None]] = {}
    ordered = [t for t in targets if catalog.backend(t.id).service == "ec2"]
    cuda = next((t for t in ordered if FAMILY_IMAGE.get(catalog.backend(t.id).image or "") == "vllm-cuda"), None)
    if cuda is not None:
        try:
            package = scheme_of_model(cuda.model_id) is not None
        except ValueError:  # an unknown scheme: the deploy refuses it (stacks/package.py)
            package = True
        if not package:
            out["vllm-cuda"] = (cuda.model_id, _own_revision(cuda))
    neuron = next((t for t in ordered if catalog.backend(t.id).image == "neuron"
                   and t.instance_types[:1] == (NEURON_PRECOMPILE_TARGET,)), None)
    if neuron is not None:
        out[kit_image_of(neuron) or "neuron"] = (neuron.model_id, _own_revision(neuron))
    return out


def _own_revision(t: Any) -> str | None:
    """The pinned commit of the backend's own stack (its first weights entry)."""
    return t.weights[0][2] if getattr(t, "weights", ()) else None


def baked_weights(region: str, targets: list[Any], boots: dict[str, str | None], images: ImageLookup,
                  account: str) -> dict[str, str]:
    """Backend id -> why its instances need no Hugging Face token: the image they boot holds
    every deployment's weights at the commit it serves, so the boot downloads nothing
    (userdata/lib.sh kit_model_revision: the pin, else the image's commit). Decided from the
    AMI's ``kit-model``/``kit-model-revision`` tags when this account owns it; an image shared by
    another account shows it no tags (EC2 User Guide, "Share an AMI with specific AWS accounts":
    "your user-defined tags are not available to any AWS account that the AMI is shared with"), so a kit image
    of the backend's family (the kit's image name, ``inference-kit-<image>-...``) is judged by what
    the kit builds into it for this configuration (``built_in``). Never for a backend whose
    weights are a package (the package build downloads them) or whose image is not built."""
    from kit import catalog
    from kit.weights import REVISION

    rule = built_in(targets)
    out: dict[str, str] = {}
    for t in targets:
        ami = boots.get(t.id)
        if catalog.backend(t.id).service != "ec2" or not ami or not getattr(t, "weights", ()) \
                or getattr(t, "serves_package", False):
            continue
        image = images.get(ami)
        kit_image = kit_image_of(t)
        if not isinstance(image, dict) or image.get("State") != "available" or not kit_image:
            continue
        if image.get("OwnerId") == account:
            tags = {x["Key"]: x["Value"] for x in image.get("Tags", [])}
            model, rev = tags.get("kit-model"), tags.get("kit-model-revision")
            rev = rev if rev and REVISION.match(rev) else None
            source = "its tags kit-model and kit-model-revision"
        else:
            if not image.get("Name", "").startswith(f"inference-kit-{kit_image}-") or kit_image not in rule:
                continue
            model, rev = rule[kit_image]
            source = (f"the kit builds {model} into the {kit_image} image for this configuration; the tags of "
                      f"{ami}, shared by {image.get('OwnerId', '?')}, are not visible here")
        # Unpinned, the boot serves the image's commit; pinned, only the commit the image holds.
        held = all(repo == model and (pin is None or pin == rev) for _, repo, pin in t.weights)
        if held:
            out[t.id] = f"not needed: image {ami} holds {model}" + (f" at {rev[:12]}" if rev else "") + \
                f", so the boot downloads nothing ({source})"
    return out
