from .config import LoraServingConfig
from .lora_checkpoint import LoraCheckpoint
from .lora_model import wrap_model_with_lora, LoraModelManager, LoraWeightManager  # noqa: F401
from .lora_module import is_lora_module

__all__ = [
    "wrap_model_with_lora",
    "LoraServingConfig",
    "LoraCheckpoint",
    "is_lora_module",
    "LoraModelManager",
    "LoraWeightManager"
]
