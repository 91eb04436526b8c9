"""attn.utils: TransformerLens's utils that attn.Model's users reach for."""

from ._lens import get_act_name, names_filter_predicate

__all__ = ["get_act_name", "names_filter_predicate"]
