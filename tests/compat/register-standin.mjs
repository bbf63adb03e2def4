import { register } from 'node:module';

register('./standin-loader.mjs', import.meta.url);
