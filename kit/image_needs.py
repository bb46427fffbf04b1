"""Which machine images a configuration boots that may not exist yet, and how each one is made:
the kit's own images (an SSM parameter ``/imagebuilder/inference-kit/ami/*`` that only a
pipeline run creates) and AMI ids given with ``-c <id>_ami``. Public DLAMI parameters always
exist where the backend is offered and are not listed.

Read by Custom::ImagesReady (stacks/image_guard.py: the deploy-time check in every backend
stack), ``python -m harness deploy`` (the same check before ``cdk deploy`` is called) and
preflight. The rule they follow is stated in docs/stacks.md, "Which images a deploy checks". Plain Python: no aws-cdk-lib, no boto3.
"""
from __future__ import annotations

from dataclasses import dataclass

from kit import variants
from kit.catalog import BACKENDS
from kit.config import BackendConfig, KitConfig
from kit.image_facts import IMAGE_PARAMETERS
from kit.image_families import boot_family


@dataclass(frozen=True)
class ImageNeed:
    image: str  # a kit image (vllm-sm75, neuron, ...), or "<id>_ami" for an AMI given by id
    region: str
    parameter: str = ""  # the SSM parameter that holds the AMI id, or
    ami: str = ""  # the AMI id itself
    stacks: tuple[str, ...] = ()  # the stacks that boot it
    backend_ids: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, str, str]:
        return self.image, self.region, self.parameter, self.ami

    def fix(self) -> str:
        """The command that makes it exist (the refusal line's end)."""
        if self.ami:
            return (f"share it with this account (its owner: python -m harness images share --account "
                    f"<this account> --ami {self.ami} --region {self.region}), or drop -c {self.image}")
        return f"build it: python -m harness images build {self.image} --region {self.region}"

    def line(self, problem: str) -> str:
        """One line: which image, where, what is wrong, who boots it, the fix."""
        verb = "boots" if len(self.stacks) == 1 else "boot"
        return f"image {self.image} ({self.region}): {problem} ({', '.join(self.stacks)} {verb} it); {self.fix()}"


def boot_need(bc: BackendConfig, config: KitConfig) -> ImageNeed | None:
    """The image one EC2 deployment boots, when it is one that may be missing; else None."""
    spec = BACKENDS[bc.id]
    if spec.service != "ec2" or not spec.image:
        return None
    region = bc.region or config.region
    name = variants.stack_name(bc.id, bc.variant)
    if bc.ami:
        return ImageNeed(f"{bc.id}_ami", region, ami=bc.ami, stacks=(name,), backend_ids=(bc.id,))
    parameter = boot_family(spec.image, bc.image_choice, config.neuron_sdk).ssm_parameter
    image = next((i for i, p in IMAGE_PARAMETERS.items() if p == parameter), None)
    if image is None:  # a public parameter (the GPU DLAMI)
        return None
    return ImageNeed(image, region, parameter=parameter, stacks=(name,), backend_ids=(bc.id,))


def image_needs(config: KitConfig, deployments: tuple[BackendConfig, ...] | None = None) -> list[ImageNeed]:
    """Every image the deployments (default: all of the configuration's) boot, merged per image
    and region, in deployment order."""
    merged: dict[tuple[str, str, str, str], ImageNeed] = {}
    for bc in config.deployments if deployments is None else deployments:
        need = boot_need(bc, config)
        if need is None:
            continue
        old = merged.get(need.key)
        if old is None:
            merged[need.key] = need
        else:
            merged[need.key] = ImageNeed(*need.key, stacks=old.stacks + need.stacks,
                                         backend_ids=tuple(dict.fromkeys(old.backend_ids + need.backend_ids)))
    return list(merged.values())


def pipeline_families(config: KitConfig) -> set[str]:
    """The image families (kit/image_facts.py FAMILY_IMAGE keys) whose pipeline stacks the app
    builds: each one a selected EC2 backend boots from the kit's image, that is without an AMI
    given by id (``-c <id>_ami``). A family every selected backend of which boots a given AMI
    gets no stack: an attendee deploying the organizer's shared image with ``--all`` would
    otherwise create the image stack, and with it its retained KMS key. A variant boots its
    backend's AMI (kit/config.py), so the selected backends decide for their variants too.
    ``python -m harness images build`` passes ``-c <id>_ami=`` so that a build is never hidden by
    an AMI in the organizer's own context (harness/account/images.py ``_stack_context``)."""
    return {BACKENDS[bc.id].image for bc in config.backends if BACKENDS[bc.id].image and not bc.ami}


def pipeline_images(config: KitConfig) -> set[str]:
    """The images whose pipeline stacks the app builds for this configuration: one per family of
    ``pipeline_families``, the Neuron family's being the configured SDK line's image
    (stacks/images.py image_specs follows the same rule; tests/stacks/test_image_guard.py and
    tests/stacks/test_image_check_scope.py check)."""
    from kit.image_facts import FAMILY_IMAGE, neuron_image

    return {neuron_image(config.neuron_sdk) if family == "neuron" else FAMILY_IMAGE[family]
            for family in pipeline_families(config)}
