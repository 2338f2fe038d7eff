"""Decoding untrusted bytes: pickles without running code, text within limits, TensorBoard
events, storage (local or remote). No framework knowledge lives here."""
