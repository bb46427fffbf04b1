"""Which machine image and which engine script each image family boots: the one place to change.

The catalog (kit/catalog.py) names a backend's family (``Backend.image``) and its boot-image
choices (``Backend.image_choices``); this table says where its AMI id comes from and which
``userdata/engine-*.sh`` starts its server. ``boot_family`` swaps in the image pipeline's
parameter (stacks/images.py publishes it) when the choice is "prebuilt"; everything else in the
EC2 construct stays as is.

Public SSM parameters, resolved by CloudFormation at deploy time (never looked up at synth):
- GPU DLAMI "Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)", per architecture; the arm64 family
  is the one that supports g5g (AWS DLAMI release notes).
- g5g and Neuron boot only the image pipelines' AMIs (stacks/images.py says which DLAMI each
  pipeline starts from).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from kit import pins
from kit.image_facts import GPU_DLAMI, IMAGE_PARAMETERS, neuron_image


@dataclass(frozen=True)
class ImageFamily:
    name: str
    ssm_parameter: str  # SSM parameter holding the AMI id
    engine_script: str  # file under userdata/ defining engine_install and engine_exec
    root_volume_gib: int  # >= the AMI's snapshot, plus engine, weights and cache
    readiness_timeout_minutes: int  # boot → install → download → load → one answer
    root_device_name: str = "/dev/sda1"  # Ubuntu DLAMIs
    ssh_user: str = "ubuntu"
    env: Mapping[str, str] = field(default_factory=dict)  # extra KIT_* variables for the engine
    # The image pipeline's AMI parameter, booted instead of ``ssm_parameter`` when the backend's
    # boot-image choice (catalog ``Backend.image_choices``) is "prebuilt".
    prebuilt_parameter: str | None = None


# vLLM on g6: the seed ran vLLM 0.30 on the L4; gemma4 tool-call parser and Gemma 4 support
# are in that line. uv provides a standalone CPython so the DLAMI's Python does not matter.
# The same pins as the vllm-cuda image (kit/pins.py): a g6 booted from the plain DLAMI installs
# exactly what the prebuilt image carries.
VLLM_GPU_ENV = {"KIT_VLLM_VERSION": pins.VLLM_VERSION, "KIT_UV_VERSION": pins.UV_VERSION,
                "KIT_PYTHON_VERSION": pins.PYTHON_VERSION}

IMAGE_FAMILIES: dict[str, ImageFamily] = {
    f.name: f
    for f in [
        ImageFamily("gpu-x86", GPU_DLAMI.format(arch="x86_64"), "engine-vllm-gpu.sh",
                    root_volume_gib=150, readiness_timeout_minutes=45, env=VLLM_GPU_ENV,
                    prebuilt_parameter=IMAGE_PARAMETERS["vllm-cuda"]),
        # g5g and Neuron boot only the pipelines' images (stacks/images.py): the sm_75 build takes
        # hours, the Neuron image carries the Neuron SDK pins and the kit's engine.
        ImageFamily("gpu-arm64", IMAGE_PARAMETERS["vllm-sm75"], "engine-vllm-g5g.sh",
                    root_volume_gib=150, readiness_timeout_minutes=45),
        # Neuron: first request compiles graphs for the configured shapes, hence the longer wait.
        ImageFamily("neuron", IMAGE_PARAMETERS["neuron"], "engine-neuron.sh",
                    root_volume_gib=200, readiness_timeout_minutes=60),
    ]
}


def image_family(name: str) -> ImageFamily:
    try:
        return IMAGE_FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown image family {name!r}; valid: {', '.join(IMAGE_FAMILIES)}") from None


def boot_family(name: str, choice: str | None = None, neuron_sdk: str | None = None) -> ImageFamily:
    """The family a backend boots: ``name`` as it is, or with the pipeline's AMI when the boot-image
    choice is "prebuilt" (CloudFormation cannot test whether a parameter exists, so this is a
    choice, not a fallback). The neuron family boots the image of ``neuron_sdk``'s line (kit/pins.py;
    None = the default line)."""
    family = image_family(name)
    if name == "neuron":
        family = replace(family, ssm_parameter=IMAGE_PARAMETERS[neuron_image(neuron_sdk)])
    if choice == "prebuilt":
        if family.prebuilt_parameter is None:
            raise ValueError(f"image family {name!r} has no prebuilt image")
        return replace(family, ssm_parameter=family.prebuilt_parameter)
    return family
