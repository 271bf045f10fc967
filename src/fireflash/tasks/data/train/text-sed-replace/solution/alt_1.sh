#!/bin/bash
python3 -c "from pathlib import Path; p = Path('/app/settings.ini'); p.write_text(p.read_text().replace('localhost', 'db.internal'))"
