"""The chat templates R2 writes for a model that ships none. Data only.

ChatML when the vocabulary has its markers; otherwise a plain role template. Both use the
tokenizer's own special tokens through the variables transformers passes to every template
(`bos_token`, `eos_token`), so no token text is ever pasted into template source. transformers
renders with trim_blocks, which eats a newline right after a block tag: newlines are expressions.
"""

CHATML_MARKERS = ("<|im_start|>", "<|im_end|>")

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

PLAIN_ROLES = (
    "{% if bos_token %}{{ bos_token }}{% endif %}"
    "{% for message in messages %}"
    "{{ message['role'] | capitalize }}: {{ message['content'] }}"
    "{% if message['role'] == 'assistant' and eos_token %}{{ eos_token }}{% endif %}"
    "{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)

# What a template must turn into text before it is used: every role, every content.
SAMPLE_CONVERSATION = (
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "What is 6 times 7?"},
    {"role": "assistant", "content": "It is 42."},
    {"role": "user", "content": "And 6 times 8?"},
)
