"""MTP (DeepSeek-V3): the policy's MTP modules as a drafter, and their offline training."""
