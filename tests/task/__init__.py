"""Tests of launcher/task/: the task spec, its fields, resources and sections."""
