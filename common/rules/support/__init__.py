"""What the rules share and are not rules themselves: the rule interface (base), the scope
tables the registry gates rules by (scopes), the plugin's repair (plugin), and when the tokenizer
rules keep their hands off (tokenizer_guard)."""
