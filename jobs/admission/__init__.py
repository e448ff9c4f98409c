"""Admission's decisions (``decisions``) and words (``words``), read and spoken without
writing; ``jobs.services.admission`` holds the locks and writes what they decide."""
