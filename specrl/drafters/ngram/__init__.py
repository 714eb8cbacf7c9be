"""N-gram prompt-lookup drafting."""
