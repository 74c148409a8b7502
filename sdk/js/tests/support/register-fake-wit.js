import { register } from 'node:module';

register('./fake-wit-hooks.js', import.meta.url);
