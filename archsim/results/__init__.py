"""Result records, text tables and (later) figures and trace export."""
