"""The shared vocabulary every part of lrdoctor speaks (state, findings, errors, numbers).

Nothing in here knows a framework; readers, rules, repair and renderers all import it.
"""
