"""Catalog and cost commands: `gpus`, `cost`, `catalog status`. (Filled in by the planning work.)"""
