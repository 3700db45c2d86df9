"""A multi-turn conversation over one model: each turn is rendered through the chat template
and only the tokens the KV cache does not already hold are evaluated."""
from .generate import chat_ids, generate
from .sampling import SamplerParams


class Conversation:
    """The messages so far; say() runs the assistant's next turn."""

    def __init__(self, model, system=None, template=None):
        self.model = model
        self.system = system
        self.template = template
        self.clear()

    def clear(self):
        """Forget every turn (the system message stays); the next turn starts a fresh cache."""
        self.messages = [{"role": "system", "content": self.system}] if self.system else []
        self.ids = []     # the last turn's prompt, as rendered and tokenized
        self.model.reset()

    def say(self, text, n_predict=-1, params=SamplerParams(), **options):
        """Yield the reply's Tokens to the user's `text` (generate()'s, last one with the stop
        reason); the reply joins the conversation when it is complete. `options` go on to
        generate() (constraint, stop, ignore_eos)."""
        turn = [*self.messages, {"role": "user", "content": text}]
        self.ids = chat_ids(self.model, turn, template=self.template)
        pieces = []
        for token in generate(self.model, self.ids, n_predict, params, reuse_cache=True, **options):
            pieces.append(token.text)
            yield token
        self.messages = [*turn, {"role": "assistant", "content": "".join(pieces)}]
