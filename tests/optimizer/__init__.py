"""Tests of launcher/optimizer/: ranking and the expected-cost model."""
