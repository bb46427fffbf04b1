from typing import Callable, List, Optional, Tuple, Union
import logging

from neuronx_distributed_inference.utils.tensor_replacement.registry import (
    TensorReplacementRegister,
)
import torch
from transformers.modeling_outputs import CausalLMOutputWithPast

logger = logging.getLogger(__name__)


def patched_get_last_kv_window(
    window_size,
    position_ids,
    latest_k,
    latest_v,
    windowed_context_encoding_window_idx=-1,
    spec_len=0,
):
    """
    Replaces https://github.com/aws-neuron/neuronx-distributed-inference/blob/main/src/neuronx_distributed_inference/modules/attention/utils.py#L634
    to convert the index tensor in torch.gather to a LongTensor. Otherwise, the function will error out.
    """
    batch_size, num_head, _, head_dim = latest_k.shape
    latest_pos = torch.amax(position_ids, dim=1)
    if (
        windowed_context_encoding_window_idx >= 1
    ):  # if windowed cte, account for current window offset
        latest_pos -= windowed_context_encoding_window_idx * window_size

    # True window size
    window_size = window_size - 1 + spec_len - 1 if spec_len > 0 else window_size - 1

    end_idx = (latest_pos + 1).clamp(min=window_size)
    start_idx = (end_idx - window_size).clamp(min=0)
    orig_indices = start_idx[:, None] + torch.arange(window_size)

    # Calculate per-batch left shifts
    left_shifts = (window_size - (end_idx % window_size)) % window_size
    base = torch.arange(window_size).expand(batch_size, window_size)
    shifted_idx = (base + left_shifts[:, None]) % window_size

    # Determine per-batch shifted gather indices
    gather_idx = torch.gather(orig_indices, dim=1, index=shifted_idx.long())
    gather_idx = (
        gather_idx[:, None, :, None]
        .expand(batch_size, num_head, window_size, head_dim)
        .to(device=latest_k.device)
    )

    # Gather to create non-physically contiguous KV cache
    latest_k = torch.gather(latest_k, dim=2, index=gather_idx.long())
    latest_v = torch.gather(latest_v, dim=2, index=gather_idx.long())
    return latest_k, latest_v


def patched_base_image_to_text_model_forward(
    self,
    input_ids: torch.LongTensor = None,
    seq_ids: Optional[torch.LongTensor] = None,
    attention_mask: Optional[torch.Tensor] = None,
    position_ids: Optional[torch.LongTensor] = None,
    past_key_values: Optional[List[torch.FloatTensor]] = None,
    inputs_embeds: Optional[torch.FloatTensor] = None,
    sampling_params: Optional[torch.FloatTensor] = None,
    prev_hidden: Optional[torch.FloatTensor] = None,
    labels: Optional[torch.LongTensor] = None,
    use_cache: Optional[bool] = None,
    output_attentions: Optional[bool] = None,
    output_hidden_states: Optional[bool] = None,
    adapter_ids: Optional[torch.LongTensor] = None,
    medusa_args=None,
    return_dict: Optional[bool] = None,
    llava_args: Optional[List] = [],
    input_capture_hook: Optional[Callable] = None,
    slot_mapping: Optional[torch.LongTensor] = None,
    block_table: Optional[torch.LongTensor] = None,
    full_context_lens: Optional[torch.LongTensor] = None,
    computed_context_lens: Optional[torch.LongTensor] = None,
    vision_embeddings: Optional[torch.FloatTensor] = None,
    vision_mask: Optional[torch.BoolTensor] = None,
    tensor_capture_hook: Optional[
        Callable
    ] = None,  # Missing argument that triggers a NameError
) -> Union[Tuple, CausalLMOutputWithPast]:
    """
    Args:
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            Labels for computing the masked language modeling loss. Indices should either be in `[0, ...,
            config.vocab_size]` or -100 (see `input_ids` docstring). Tokens with indices set to `-100` are ignored
            (masked), the loss is only computed for the tokens with labels in `[0, ..., config.vocab_size]`.
    """
    # infer attention_mask from position_ids if not provided
    if attention_mask is None:
        attention_mask = self._infer_attention_mask(position_ids)

    if seq_ids is None:
        seq_ids = torch.arange(input_ids.shape[0])

    input_ids, attention_mask, position_ids, seq_ids, sampling_params = (
        self.preprocess_inputs(
            input_ids=input_ids,
            seq_ids=seq_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            sampling_params=sampling_params,
            prev_hidden=prev_hidden,
            labels=labels,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            adapter_ids=adapter_ids,
            medusa_args=medusa_args,
            return_dict=return_dict,
            llava_args=llava_args,
            input_capture_hook=input_capture_hook,
            slot_mapping=slot_mapping,
            block_table=block_table,
            full_context_lens=full_context_lens,
            computed_context_lens=computed_context_lens,
        )
    )

    # Bypass _get_model_outputs entirely. NxDI 0.8.0 added a
    # deepstack_vision_embeds arg that gets forwarded to the CTE/TKG
    # models, but the ImageToTextModelWrapper.input_generator only
    # traces 24 inputs (no deepstack). Calling the models directly
    # with exactly 24 positional args avoids the mismatch.
    _empty = torch.empty(0)

    if self._is_prefill(position_ids):
        # Prefill: vision tensors must match the traced shapes even for
        # text-only inputs.  The CTE NEFF was traced with
        #   vision_embeddings=[batch, seq_len, hidden_size]
        #   vision_mask=[batch, seq_len, 1]
        # so we create zero-filled tensors when they are not provided.
        batch_size = input_ids.shape[0]
        n_active = input_ids.shape[1]  # == bucket seq_len
        if vision_embeddings is None or vision_embeddings.numel() == 0:
            dtype = getattr(self.config, "neuron_config", None)
            dtype = dtype.torch_dtype if dtype is not None else torch.bfloat16
            vision_embeddings = torch.zeros(
                batch_size, n_active, self.config.hidden_size, dtype=dtype
            )
        if vision_mask is None or vision_mask.numel() == 0:
            vision_mask = torch.zeros(batch_size, n_active, 1, dtype=torch.int32)

        outputs = self.context_encoding_model(
            input_ids,
            attention_mask,
            position_ids,
            seq_ids,
            sampling_params,
            _empty,  # prev_hidden
            _empty,  # adapter_ids
            _empty,  # accepted_indices
            _empty,  # current_length
            _empty,  # medusa_mask
            _empty,  # scatter_index
            _empty,  # slot_mapping
            _empty,  # active_block_table
            _empty,  # num_queries
            _empty,  # computed_context_lens
            _empty,  # tile_q_indices
            _empty,  # tile_block_tables
            _empty,  # tile_masks
            _empty,  # inputs_embeds
            _empty,  # kv_cache
            _empty,  # active_mask
            _empty,  # rotary_position_ids
            vision_embeddings,
            vision_mask,
        )
        self.kv_cache_populated = True
        is_run_on_neuron = self.context_encoding_model.is_neuron()
    else:
        # Token generation: vision tensors must be empty (traced as [0]).
        outputs = self.token_generation_model(
            input_ids,
            attention_mask,
            position_ids,
            seq_ids,
            sampling_params,
            _empty,  # prev_hidden
            _empty,  # adapter_ids
            _empty,  # accepted_indices
            _empty,  # current_length
            _empty,  # medusa_mask
            _empty,  # scatter_index
            _empty,  # slot_mapping
            _empty,  # active_block_table
            _empty,  # num_queries
            _empty,  # computed_context_lens
            _empty,  # tile_q_indices
            _empty,  # tile_block_tables
            _empty,  # tile_masks
            _empty,  # inputs_embeds
            _empty,  # kv_cache
            _empty,  # active_mask
            _empty,  # rotary_position_ids
            _empty,  # vision_embeddings (empty for TKG)
            _empty,  # vision_mask (empty for TKG)
        )
        is_run_on_neuron = self.token_generation_model.is_neuron()

    generation_model = self.get_generation_model()
    if not generation_model.is_neuron():
        self._copy_past_key_values(outputs)

    # Process outputs
    constructed_outputs = self._get_constructed_outputs(outputs, is_run_on_neuron)

    # Apply tensor_capture_hook if provided and tensors are captured
    if tensor_capture_hook and constructed_outputs.captured_tensors:
        # Apply the hook if captured tensors are found
        tensor_capture_hook(self, constructed_outputs.captured_tensors)

    return constructed_outputs


def patched_hf_adapter_prepare_inputs_for_generation(
    self,
    input_ids,
    past_key_values=None,
    attention_mask=None,
    inputs_embeds=None,
    sampling_params=None,
    adapter_ids=None,
    **kwargs,
):
    # Store KV cache flag before forward pass.
    self.prev_kv_cache_populated = self.neuron_model.kv_cache_populated
    if self.neuron_model.kv_cache_populated:
        input_ids = input_ids[:, -1:]

    accepted_indices = kwargs.get("accepted_indices", None)
    current_length = kwargs.get("current_length", None)
    medusa_mask = kwargs.get("medusa_mask", None)
    scatter_index = kwargs.get("scatter_index", None)
    position_ids = kwargs.get("position_ids", None)
    input_capture_hook = kwargs.get("input_capture_hook", None)

    if attention_mask is not None and position_ids is None:
        # create position_ids on the fly for batch generation
        position_ids = attention_mask.long().cumsum(-1) - 1
        if self.input_start_offsets:
            if len(self.input_start_offsets) > 1:
                position_ids += torch.tensor(
                    self.input_start_offsets,
                    dtype=position_ids.dtype,
                    device=position_ids.device,
                )[:, None]
            else:
                position_ids += self.input_start_offsets[0]
            for i, offset in enumerate(self.input_start_offsets):
                position_ids[i, 0:offset] = torch.arange(offset)
        else:
            position_ids.masked_fill_(attention_mask == 0, 1)

        if self.neuron_model.kv_cache_populated:
            position_ids = torch.amax(position_ids, 1, keepdim=True)
            position_ids = position_ids + 1
    # if `inputs_embeds` are passed, we only want to use them in the 1st generation step
    if inputs_embeds is not None and past_key_values is None:
        model_inputs = {"inputs_embeds": inputs_embeds}
    else:
        model_inputs = {"input_ids": input_ids}

    model_inputs.update(
        {
            "position_ids": position_ids,
            "past_key_values": past_key_values,
            "use_cache": kwargs.get("use_cache", False),
            "attention_mask": attention_mask,
            "medusa_args": (
                accepted_indices,
                current_length,
                medusa_mask,
                scatter_index,
            ),
            "sampling_params": sampling_params,
            "input_capture_hook": input_capture_hook,
            # "tensor_capture_hook": tensor_capture_hook, -> FIX: Otherwise raises a breaking NameError
            "adapter_ids": adapter_ids,
        }
    )

    tf_args = []
    if self.neuron_config.tensor_replacement_config:
        if hasattr(self, "generation_step"):
            self.generation_step += 1
        else:
            self.generation_step = 1
        reg = TensorReplacementRegister.get_instance()
        tf, masks = reg.step_args(self.generation_step)
        tf_args = tf + masks

    # Only add tf_args if not empty
    if tf_args:
        model_inputs["tf_args"] = tf_args

    # WARNING: This is needed for propagating additional kwargs to the neuron model
    additional_kwargs = self.neuron_model.get_required_kwargs()
    for arg in additional_kwargs:
        model_inputs.update({arg: kwargs.get(arg, None)})

    return model_inputs


def apply_patch() -> None:
    """Apply NxDI monkey-patches required for Gemma4 E2B."""
    import neuronx_distributed_inference.modules.attention.utils as u

    u.get_last_kv_window = patched_get_last_kv_window

    import neuronx_distributed_inference.models.image_to_text_model_base as mm_base

    mm_base.NeuronBaseForImageToText.forward = patched_base_image_to_text_model_forward

    # Patch to_pretrained_config to remove read-only properties that
    # PretrainedConfig defines as @property (no setter). Without this,
    # HuggingFaceGenerationAdapter.__init__ fails with:
    #   AttributeError: property 'use_return_dict' ... has no setter
    try:
        import neuronx_distributed_inference.utils.hf_adapter as hf_adapter
        import copy

        from transformers import PretrainedConfig

        _readonly_props = set()
        for attr in dir(PretrainedConfig):
            obj = getattr(PretrainedConfig, attr, None)
            if isinstance(obj, property) and obj.fset is None:
                _readonly_props.add(attr)

        def _strip_readonly(d):
            """Remove read-only property keys from a config dict."""
            return {k: v for k, v in d.items() if k not in _readonly_props}

        _orig_convert = hf_adapter._convert_modality_config_to_pretrained_config

        def _patched_convert(config_dict, modality):
            if modality in config_dict and isinstance(config_dict[modality], dict):
                modality_config = config_dict[modality]
                modality_config.pop("neuron_config", None)
                config_dict[modality] = PretrainedConfig(
                    **_strip_readonly(modality_config)
                )
            return config_dict

        hf_adapter._convert_modality_config_to_pretrained_config = _patched_convert

        _orig_to_pretrained_config = hf_adapter.to_pretrained_config

        def _patched_to_pretrained_config(config):
            """Remove read-only property keys before passing to PretrainedConfig."""
            from neuronx_distributed_inference.utils.hf_adapter import to_dict

            config_dict = copy.deepcopy(to_dict(config))
            config_dict["dtype"] = config.neuron_config.torch_dtype
            config_dict.pop("neuron_config", None)
            config_dict = _strip_readonly(config_dict)
            config_dict = _patched_convert(config_dict, "text_config")
            config_dict = _patched_convert(config_dict, "vision_config")
            return PretrainedConfig(**config_dict)

        hf_adapter.to_pretrained_config = _patched_to_pretrained_config

        hf_adapter.HuggingFaceGenerationAdapter.prepare_inputs_for_generation = (
            patched_hf_adapter_prepare_inputs_for_generation
        )
    except ImportError:
        pass
