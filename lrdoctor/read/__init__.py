"""Reading untrusted input, in three layers: ``bytes`` (safe decoding, no framework
knowledge), ``scan`` (files listed, grouped and classified by content) and ``layouts``
(one module per framework layout: what its files mean)."""
