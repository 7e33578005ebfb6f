"""Writers of trace formats (Chakra .et), for synthetic data and sample traces."""
