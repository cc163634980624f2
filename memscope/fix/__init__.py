"""``memscope fix``: planning, editing and verifying the source change."""
