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


def image_tags(ec2: Any, ami: str) -> dict[str, str] | None:
    """The AMI's tags (None: not visible)."""
    found = ec2.describe_images(ImageIds=[ami]).get("Images", [])
    return {t["Key"]: t["Value"] for t in found[0].get("Tags", [])} if found else None


def check_weights(add: Add, region: str, targets: list[Any], boots: dict[str, str | None], ec2: Any,
                  short_error: Callable[[BaseException], str]) -> None:
    """``targets``: preflight Targets (``weights``: (deployment, repository, commit or None) each);
    ``boots``: backend id -> the AMI its instances boot when it is a kit image that may carry
    weights (its image parameter's value, or ``-c <id>_ami``), None when unknown."""
    from kit.image_facts import IMAGE_PARAMETERS  # noqa: F401 (the parameters boots come from)

    tags_of: dict[str, dict[str, str] | None | str] = {}
    for t in targets:
        if not getattr(t, "weights", ()):
            continue
        ami = boots.get(t.id)
        tags: dict[str, str] | None | str = None
        if ami:
            if ami not in tags_of:
                try:
                    tags_of[ami] = image_tags(ec2, ami)
                except Exception as exc:  # noqa: BLE001 - a warning, the deploy's own checks decide
                    tags_of[ami] = f"could not read the tags of {ami}: {short_error(exc)}"
            tags = tags_of[ami]
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
