"""Devices: what work costs (FLOPs, bytes), device traces (FedScale import, generated populations)."""
