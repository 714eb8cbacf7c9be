"""Suffix drafting (SuffixDecoding; DAS): the drafter and its suffix tries."""
