"""EAGLE-3 (Li et al. 2025): the drafter, its head, offline training and the public export layout."""
